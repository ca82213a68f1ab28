package capture

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/caps"
)

// Limits of the program's capture support.
const (
	// Slots is how many captures may run at once on one program.
	Slots = int(gen.FastdropFdCapLayoutFD_CAP_SLOTS)
	// MaxSnaplen is the largest snap length: a jumbo frame.
	MaxSnaplen = int(gen.FastdropFdCapLayoutFD_CAP_SNAP_MAX)
	// RingBytes is the size of each capture's ring buffer.
	RingBytes = int(gen.FastdropFdCapLayoutFD_CAP_RING)
)

// Sentinel errors.
var (
	// ErrNoSlot: every capture slot of the program is taken by a
	// running capture.
	ErrNoSlot = errors.New("every capture slot is in use")
	// ErrNoCapture: the program has no capture support (maps of an
	// older xdpdrop).
	ErrNoCapture = errors.New("the program has no capture support")
)

// Verdicts is a set of verdicts a capture selects; zero selects every
// frame.
type Verdicts uint32

// The verdicts, as the program tests them: the XDP action returned, and
// Malformed for a frame the parser refused (which is also dropped or
// passed, as the rule set says for malformed frames).
const (
	VerdictDrop      = Verdicts(gen.FastdropFdCapLayoutFD_CAP_V_DROP)
	VerdictPass      = Verdicts(gen.FastdropFdCapLayoutFD_CAP_V_PASS)
	VerdictRedirect  = Verdicts(gen.FastdropFdCapLayoutFD_CAP_V_REDIRECT)
	VerdictMalformed = Verdicts(gen.FastdropFdCapLayoutFD_CAP_V_MALFORMED)
)

var verdictNames = []struct {
	v    Verdicts
	name string
}{{VerdictDrop, "drop"}, {VerdictPass, "pass"}, {VerdictRedirect, "redirect"}, {VerdictMalformed, "malformed"}}

// VerdictNames lists the names ParseVerdict accepts.
func VerdictNames() []string {
	n := make([]string, len(verdictNames))
	for i, v := range verdictNames {
		n[i] = v.name
	}
	return n
}

// ParseVerdict returns the verdict named s (drop, pass, redirect,
// malformed).
func ParseVerdict(s string) (Verdicts, error) {
	for _, v := range verdictNames {
		if v.name == s {
			return v.v, nil
		}
	}
	return 0, fmt.Errorf("unknown verdict %q: want %s", s, strings.Join(VerdictNames(), ", "))
}

// Selection is what a capture asks the program for. The zero value takes
// every frame, whole up to MaxSnaplen.
type Selection struct {
	// Verdicts selects frames by verdict; 0: any.
	Verdicts Verdicts
	// RuleSlot selects the frames of one rule, by its counter slot
	// (fastdrop.Engine.RuleSlots); 0: any.
	RuleSlot uint32
	// OnQueue selects the frames of rx queue Queue only.
	OnQueue bool
	Queue   int
	// Every sends 1 in Every selected frames (counted per CPU); 0 or 1:
	// each.
	Every uint32
	// PerSecond caps the samples per second of each CPU; 0: no cap. The
	// program's cap is per CPU: Sampler makes it exact.
	PerSecond uint32
	// Snaplen is how many bytes of each frame to send (1..MaxSnaplen);
	// 0: MaxSnaplen.
	Snaplen int
}

func (s Selection) check() error {
	if s.Snaplen < 0 || s.Snaplen > MaxSnaplen {
		return fmt.Errorf("snap length %d: want 1 to %d", s.Snaplen, MaxSnaplen)
	}
	if s.OnQueue && s.Queue < 0 {
		return fmt.Errorf("rx queue %d: want 0 or more", s.Queue)
	}
	if s.Verdicts&^(VerdictDrop|VerdictPass|VerdictRedirect|VerdictMalformed) != 0 {
		return fmt.Errorf("unknown verdict bits %#x", uint32(s.Verdicts))
	}
	return nil
}

// Maps are the program's maps a capture uses.
type Maps struct {
	Main   *ebpf.Map // fd_main: the capture slots and the word the program tests
	PerCPU *ebpf.Map // fd_cap_cpu: per-CPU counts
	Rings  *ebpf.Map // fd_cap_rings: each slot's ring
	// Samples is fd_cap_samples: the ring of rules' sample modifiers.
	Samples *ebpf.Map
}

// MapsOf picks the capture's maps out of a program's maps by name (as
// fastdrop.Engine.Maps returns them).
func MapsOf(m map[string]*ebpf.Map) (Maps, error) {
	ms := Maps{Main: m[gen.FastdropMapFdMain], PerCPU: m[gen.FastdropMapFdCapCpu], Rings: m[gen.FastdropMapFdCapRings],
		Samples: m[gen.FastdropMapFdCapSamples]}
	if ms.Main == nil || ms.PerCPU == nil || ms.Rings == nil || ms.Samples == nil {
		return ms, fmt.Errorf("capture: %w", ErrNoCapture)
	}
	return ms, nil
}

// Capture is one registration and its ring. Read is for one goroutine;
// Stats and Close may be called from any.
type Capture struct {
	maps  Maps
	ctl   *ctlMem
	slot  int
	nonce uint32
	ring  *ebpf.Map
	rd    *ringbuf.Reader
	sel   Selection
	// monoOffset turns the program's CLOCK_MONOTONIC stamps into wall
	// time.
	monoOffset time.Duration

	// rules: this reads the rule samples' ring (ReadRuleSamples),
	// whose reader it is while owned.
	rules, owned bool

	mu     sync.Mutex
	closed bool
	// final holds the counts read at Close.
	final Stats
	rec   ringbuf.Record
}

// Offsets in fd_main.
const (
	offActive  = int(gen.FastdropFdLayoutFD_MAIN_CAP_ACTIVE)
	offCtl     = int(gen.FastdropFdLayoutFD_MAIN_CAP)
	offClaimed = offCtl
	selSize    = 32 // struct fd_cap_sel
	offSel     = offCtl + 64
	// The owner of the rule samples' ring (its one reader): pad[0].
	offRuleOwner = offCtl + 4
	// claimed's bit for that reader.
	claimRules = uint32(gen.FastdropFdCapLayoutFD_CAP_RULES)
	// the fields of struct fd_cap_sel
	selNonce, selVerdicts, selSlot, selQueue, selEvery, selPerSec, selSnaplen, selOwner = 0, 4, 8, 12, 16, 20, 24, 28
)

func selOff(slot, field int) int { return offSel + slot*selSize + field }

// Start registers sel with the program whose maps are m and returns the
// capture; samples arrive from then on. It needs CAP_BPF (a ring buffer
// is a map). Slots whose capture process is gone are taken over.
func Start(m Maps, sel Selection) (*Capture, error) {
	if err := sel.check(); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	if sel.Snaplen == 0 {
		sel.Snaplen = MaxSnaplen
	}
	if m.Main == nil || m.PerCPU == nil || m.Rings == nil || m.Rings.MaxEntries() < uint32(Slots) {
		return nil, fmt.Errorf("capture: %w", ErrNoCapture)
	}
	ctl, err := mapCtl(m.Main, offSel+Slots*selSize)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	c := &Capture{maps: m, ctl: ctl, slot: -1, sel: sel}
	fail := func(err error) (*Capture, error) {
		return nil, errors.Join(fmt.Errorf("capture: %w", err), c.release())
	}
	c.ring, err = ebpf.NewMap(&ebpf.MapSpec{Name: "fd_cap_ring", Type: ebpf.RingBuf, MaxEntries: uint32(RingBytes)})
	if err != nil {
		return fail(fmt.Errorf("create ring buffer: %w%s", err, caps.Suffix(err, caps.Of(caps.BPF))))
	}
	if c.rd, err = ringbuf.NewReader(c.ring); err != nil {
		return fail(fmt.Errorf("map ring buffer: %w", err))
	}
	var nb [4]byte
	for c.nonce == 0 {
		if _, err := rand.Read(nb[:]); err != nil {
			return fail(err)
		}
		c.nonce = binary.NativeEndian.Uint32(nb[:])
	}
	if c.slot = c.claim(); c.slot < 0 {
		return fail(ErrNoSlot)
	}
	// The slot is ours and its active bit clear: the program reads
	// neither the selection nor the ring until the bit is set.
	if err := m.Rings.Put(uint32(c.slot), c.ring); err != nil {
		return fail(fmt.Errorf("register ring buffer: %w", err))
	}
	queue := uint32(0)
	if sel.OnQueue {
		queue = uint32(sel.Queue) + 1
	}
	for _, f := range []struct {
		off int
		v   uint32
	}{
		{selNonce, c.nonce}, {selVerdicts, uint32(sel.Verdicts)}, {selSlot, sel.RuleSlot},
		{selQueue, queue}, {selEvery, sel.Every}, {selPerSec, sel.PerSecond}, {selSnaplen, uint32(sel.Snaplen)},
	} {
		ctl.store(selOff(c.slot, f.off), f.v)
	}
	c.monoOffset = monoOffset()
	ctl.or(offActive, 1<<c.slot)
	// The program samples only on its full path, which frames take
	// while the flag that follows cap_active is set.
	if err := fastdrop.SyncCapture(m.Main); err != nil {
		return fail(err)
	}
	return c, nil
}

// claim takes a free slot, or one whose owner process is gone, and
// returns it (owner set to this process), or -1.
func (c *Capture) claim() int {
	pid := uint32(os.Getpid())
	for {
		claimed := c.ctl.load(offClaimed)
		free := -1
		for i := range Slots {
			if claimed&(1<<i) == 0 {
				free = i
				break
			}
		}
		if free < 0 {
			break
		}
		if c.ctl.cas(offClaimed, claimed, claimed|1<<free) {
			c.ctl.store(selOff(free, selOwner), pid)
			return free
		}
	}
	// Every slot is claimed: take over one whose process is gone. The
	// owner word is swapped, so only one process takes a slot over; a
	// slot being set up or released has owner 0 and is left alone.
	for i := range Slots {
		owner := c.ctl.load(selOff(i, selOwner))
		if owner == 0 || owner == pid || alive(int(owner)) {
			continue
		}
		if c.ctl.cas(selOff(i, selOwner), owner, pid) {
			c.ctl.and(offActive, ^uint32(1<<i))
			return i
		}
	}
	return -1
}

// alive reports whether process pid may still run (EPERM: it does, as
// another user).
func alive(pid int) bool {
	return unix.Kill(pid, 0) != unix.ESRCH
}

// monoOffset is wall time minus CLOCK_MONOTONIC, now.
func monoOffset() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return time.Duration(time.Now().UnixNano() - ts.Nano())
}

// Slot is the capture slot this capture holds (-1 for ReadRuleSamples).
func (c *Capture) Slot() int { return c.slot }

// ErrRuleSamplesBusy: another process reads the rule samples.
var ErrRuleSamplesBusy = errors.New("another capture reads the rule samples")

// ReadRuleSamples returns a Capture of the samples that rules' sample
// modifiers send (`drop udp dport 11211 sample 1/1000`), which wait in a
// ring of the program's for whoever reads them, oldest first. A ring has
// one reader: a second one gets ErrRuleSamplesBusy while the first runs
// (one whose process is gone is taken over). Its Stats count every rule
// sample since the program was loaded; Seen is Sent plus Lost.
func ReadRuleSamples(m Maps) (*Capture, error) {
	if m.Main == nil || m.PerCPU == nil || m.Samples == nil {
		return nil, fmt.Errorf("capture: %w", ErrNoCapture)
	}
	ctl, err := mapCtl(m.Main, offSel+Slots*selSize)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	c := &Capture{maps: m, ctl: ctl, slot: -1, rules: true}
	pid := uint32(os.Getpid())
	claimed := false
	for !claimed {
		w := ctl.load(offClaimed)
		if w&claimRules == 0 {
			if claimed = ctl.cas(offClaimed, w, w|claimRules); claimed {
				ctl.store(offRuleOwner, pid)
			}
			continue
		}
		owner := ctl.load(offRuleOwner)
		if owner == 0 || alive(int(owner)) || !ctl.cas(offRuleOwner, owner, pid) {
			ctl.close()
			return nil, fmt.Errorf("capture: %w (process %d)", ErrRuleSamplesBusy, owner)
		}
		claimed = true
	}
	c.owned = true
	if c.rd, err = ringbuf.NewReader(m.Samples); err != nil {
		return nil, errors.Join(fmt.Errorf("capture: map ring buffer: %w", err), c.release())
	}
	c.monoOffset = monoOffset()
	return c, nil
}

// ErrClosed is returned by Read after Close.
var ErrClosed = errors.New("capture closed")

// Read waits for the next sample, at most until deadline (zero: no
// limit; os.ErrDeadlineExceeded when it passes). The sample's Data is
// valid until the next Read.
func (c *Capture) Read(deadline time.Time, s *Sample) error {
	c.rd.SetDeadline(deadline)
	for {
		if err := c.rd.ReadInto(&c.rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return ErrClosed
			}
			return err
		}
		if decode(c.rec.RawSample, s, c.monoOffset) && s.nonce == c.nonce && s.RuleSample == c.rules {
			return nil
		}
		// A sample written for the slot's previous capture (the
		// program read the old selection), or cut short: skip it.
	}
}

// Stats are a capture's counts, summed over the CPUs.
type Stats struct {
	// Seen is how many frames the selection picked (before Every and
	// PerSecond).
	Seen uint64 `json:"seen"`
	// Sent is how many samples the program wrote into the ring.
	Sent uint64 `json:"sent"`
	// Lost is how many samples the program could not write because the
	// ring was full: the capture fell behind.
	Lost uint64 `json:"lost"`
}

// Stats reads the capture's counts.
func (c *Capture) Stats() (Stats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.final, nil
	}
	return c.readStats()
}

func (c *Capture) readStats() (Stats, error) {
	var st Stats
	buf := make([]byte, c.maps.PerCPU.ValueSize())
	const cntSize = 48 // struct fd_cap_cnt
	for cpu := range c.maps.PerCPU.MaxEntries() {
		if err := c.maps.PerCPU.Lookup(cpu, &buf); err != nil {
			return st, fmt.Errorf("capture: read counts of CPU %d: %w", cpu, err)
		}
		ne := binary.NativeEndian
		if c.rules {
			b := buf[Slots*cntSize:]
			st.Sent += ne.Uint64(b[0:8])
			st.Lost += ne.Uint64(b[8:16])
			st.Seen = st.Sent + st.Lost
			continue
		}
		b := buf[c.slot*cntSize:]
		if ne.Uint32(b[40:44]) != c.nonce {
			continue // this CPU never saw a frame for this capture
		}
		st.Seen += ne.Uint64(b[0:8])
		st.Sent += ne.Uint64(b[8:16])
		st.Lost += ne.Uint64(b[16:24])
	}
	return st, nil
}

// Close removes the registration (the program stops sampling for it at
// once), reads the final counts, and frees the ring. A Read waiting in
// another goroutine returns ErrClosed.
func (c *Capture) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	if c.slot >= 0 {
		// Clear the bit first: from here on the program neither sends
		// nor counts for this slot, so the counts read now are final.
		c.ctl.and(offActive, ^uint32(1<<c.slot))
	}
	if c.slot >= 0 || c.rules {
		st, err := c.readStats()
		errs = append(errs, err)
		c.final = st
	}
	errs = append(errs, c.release())
	return errors.Join(errs...)
}

// release undoes what Start did, in reverse.
func (c *Capture) release() error {
	var errs []error
	if c.slot >= 0 {
		c.ctl.and(offActive, ^uint32(1<<c.slot))
		// The last capture to end puts frames back on the plain path.
		errs = append(errs, fastdrop.SyncCapture(c.maps.Main))
		if err := c.maps.Rings.Delete(uint32(c.slot)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("capture: unregister ring buffer: %w", err))
		}
		c.ctl.store(selOff(c.slot, selNonce), 0)
		// Owner 0 before the claim bit goes: no one takes over a slot
		// that is being freed.
		c.ctl.store(selOff(c.slot, selOwner), 0)
		c.ctl.and(offClaimed, ^uint32(1<<c.slot))
		c.slot = -1
	}
	if c.owned {
		c.ctl.store(offRuleOwner, 0)
		c.ctl.and(offClaimed, ^claimRules)
		c.owned = false
	}
	if c.rd != nil {
		errs = append(errs, c.rd.Close())
		c.rd = nil
	}
	if c.ring != nil {
		errs = append(errs, c.ring.Close())
		c.ring = nil
	}
	if c.ctl != nil {
		errs = append(errs, c.ctl.close())
		c.ctl = nil
	}
	return errors.Join(errs...)
}

// RuleSampleStats counts the samples of rules' sample modifiers since the
// program was loaded (Seen is Sent plus Lost), without reading them: for
// an exporter beside a capture that reads them.
func RuleSampleStats(m Maps) (Stats, error) {
	if m.PerCPU == nil {
		return Stats{}, fmt.Errorf("capture: %w", ErrNoCapture)
	}
	c := &Capture{maps: m, slot: -1, rules: true}
	return c.readStats()
}

// Registrations returns the capture slots in use on the program whose
// fd_main is main (bit i: slot i), as the program sees them: 0 means the
// program samples nothing.
func Registrations(main *ebpf.Map) (uint32, error) {
	ctl, err := mapCtl(main, offSel+Slots*selSize)
	if err != nil {
		return 0, fmt.Errorf("capture: %w", err)
	}
	defer ctl.close()
	return ctl.load(offActive), nil
}

package fastdrop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/caps"
)

// Layout of policing (bpf/fastdrop.h).
const (
	policeMax   = int(gen.FastdropFdLayoutFD_POLICE_MAX)
	pcntSize    = int(gen.FastdropFdLayoutFD_PCNT_SIZE)
	banLensMax  = int(gen.FastdropFdLayoutFD_BAN_LENS)
	srcWays     = int(gen.FastdropFdLayoutFD_SRC_WAYS)
	slotBanned  = uint32(gen.FastdropFdLayoutFD_SLOT_BANNED)
	actLimitVal = uint32(ActionLimit) << valActShift
	// Byte offsets of the limit members of struct fd_rule_rec
	// (TestRecordLayout checks them).
	recLimRate   = 96
	recLimBurst  = 104
	recLimBan    = 108
	recLimPolice = 112
	recLimFlags  = 114
	recLimLen4   = 115
	recLimLen6   = 116
)

// policeState is the engine's view of the police entries: which limit
// rule (by counter slot) has which entry, and which are free. Entry 0 is
// no rule's (the test clock, and the counters of removed rules).
type policeState struct {
	of    map[uint32]uint16 // slot -> entry
	epoch map[uint32]uint32 // slot -> fd_police.epoch
	free  []uint16
	next  uint16
	// The ban prefix lengths the configurations list (fd_conf.ban4/6).
	lens4, lens6 []uint8
}

func (ps *policeState) reset() {
	ps.of, ps.epoch = make(map[uint32]uint16), make(map[uint32]uint32)
	ps.free, ps.next = nil, 1
	ps.lens4, ps.lens6 = nil, nil
}

// cval is the val of compound rule r with counter slot s: a limit rule's
// names its police entry instead (FD_ACT_LIMIT).
func (e *Engine) cval(r *Rule, s uint32) uint32 {
	if r.Action == ActionLimit {
		return actLimitVal | uint32(e.pol.of[s])
	}
	return mkVal(r.Action, s)
}

// cvalSlot is the counter slot of a compound val (see cval).
func (e *Engine) cvalSlot(v uint32) uint32 {
	if v&actLimitVal == actLimitVal {
		for s, i := range e.pol.of {
			if uint32(i) == v&valSlotMask {
				return s
			}
		}
		return 0
	}
	return valSlot(v)
}

// assignPolice gives the added limit rules of p police entries, and
// returns those it gave (for undo).
func (e *Engine) assignPolice(p *plan, epoch uint32) ([]uint32, error) {
	var given []uint32
	for _, i := range p.added {
		if p.rules[i].Action != ActionLimit {
			continue
		}
		var idx uint16
		if n := len(e.pol.free); n > 0 {
			idx, e.pol.free = e.pol.free[n-1], e.pol.free[:n-1]
		} else if int(e.pol.next) < policeMax {
			idx = e.pol.next
			e.pol.next++
		} else {
			e.undoPolice(given)
			return nil, fmt.Errorf("more than %d limit rules at once: %w", policeMax-1, ErrCapacity)
		}
		e.pol.of[p.slots[i]] = idx
		e.pol.epoch[p.slots[i]] = epoch
		given = append(given, p.slots[i])
	}
	return given, nil
}

func (e *Engine) undoPolice(slots []uint32) {
	for _, s := range slots {
		e.pol.free = append(e.pol.free, e.pol.of[s])
		delete(e.pol.of, s)
		delete(e.pol.epoch, s)
	}
}

// writePolicers writes the police entries of the added limit rules, before
// any val names them.
func (e *Engine) writePolicers(rules []Rule, slots []uint32, added []int) error {
	m := e.maps[gen.FastdropMapFdPolicers]
	for _, i := range added {
		r := &rules[i]
		if r.Action != ActionLimit {
			continue
		}
		s := slots[i]
		cost, burst, ban, flags := r.Limit.police()
		l4, l6 := r.Limit.lens()
		pe := gen.FastdropFdPolice{Cost: cost, Burst: burst, BanNs: ban, Slot: s, Epoch: e.pol.epoch[s], Flags: flags, Len4: l4, Len6: l6}
		if err := m.Put(uint32(e.pol.of[s]), &pe); err != nil {
			return fmt.Errorf("write policer: %w", err)
		}
	}
	return nil
}

// retirePolice frees the police entries of removed rules' slots (no
// program run uses them any more): their counters go to entry 0's.
func (e *Engine) retirePolice(gone []uint32) error {
	for _, s := range gone {
		idx, ok := e.pol.of[s]
		if !ok {
			continue
		}
		var b, r [pcntSize]byte
		for cpu := range e.ncpu {
			off := int64(cpu*policeMax*pcntSize + int(idx)*pcntSize)
			roff := int64(cpu * policeMax * pcntSize)
			if _, err := e.mem.pcnt.ReadAt(b[:], off); err != nil {
				return fmt.Errorf("read limit counters: %w", err)
			}
			if _, err := e.mem.pcnt.ReadAt(r[:], roff); err != nil {
				return fmt.Errorf("read limit counters: %w", err)
			}
			for k := 0; k < pcntSize; k += 8 {
				binary.NativeEndian.PutUint64(r[k:], binary.NativeEndian.Uint64(r[k:])+binary.NativeEndian.Uint64(b[k:]))
			}
			if _, err := e.mem.pcnt.WriteAt(r[:], roff); err != nil {
				return fmt.Errorf("write limit counters: %w", err)
			}
			if _, err := e.mem.pcnt.WriteAt(make([]byte, pcntSize), off); err != nil {
				return fmt.Errorf("write limit counters: %w", err)
			}
		}
		delete(e.pol.of, s)
		delete(e.pol.epoch, s)
		e.pol.free = append(e.pol.free, idx)
	}
	return nil
}

// pcntSums sums the limit counters of every entry over the CPUs.
func (e *Engine) pcntSums() ([]gen.FastdropFdPcnt, error) {
	sums := make([]gen.FastdropFdPcnt, policeMax)
	buf := make([]byte, policeMax*pcntSize)
	for cpu := range e.ncpu {
		if _, err := e.mem.pcnt.ReadAt(buf, int64(cpu*policeMax*pcntSize)); err != nil {
			return nil, fmt.Errorf("read limit counters: %w", err)
		}
		for i := range sums {
			b := buf[i*pcntSize:]
			sums[i].ExceedPackets += binary.NativeEndian.Uint64(b)
			sums[i].ExceedBytes += binary.NativeEndian.Uint64(b[8:])
			sums[i].Bans += binary.NativeEndian.Uint64(b[16:])
			sums[i].Sources += binary.NativeEndian.Uint64(b[24:])
			sums[i].Evicted += binary.NativeEndian.Uint64(b[32:])
		}
	}
	return sums, nil
}

// LimitCounter is what a limit rule's policer counted: the rule's frames
// split into those that conformed (passed) and exceeded (dropped), the
// sources it banned and the per-source buckets it made.
type LimitCounter struct {
	Conform Counter `json:"conform"`
	Exceed  Counter `json:"exceed"`
	Bans    uint64  `json:"bans"`
	// Sources counts the per-source buckets made: new sources, and
	// sources seen again after theirs was evicted (the table is of a
	// fixed size, Options.LimitSources).
	Sources uint64 `json:"sources"`
	// Evicted counts the buckets of other sources that new sources of
	// this rule took: the table was full where they hash to.
	Evicted uint64 `json:"evicted"`
}

// split makes the counter of a limit rule's slot (every frame it matched)
// its LimitCounter.
func split(total Counter, pc gen.FastdropFdPcnt) LimitCounter {
	ex := Counter{Packets: min(pc.ExceedPackets, total.Packets), Bytes: min(pc.ExceedBytes, total.Bytes)}
	return LimitCounter{
		Conform: Counter{Packets: total.Packets - ex.Packets, Bytes: total.Bytes - ex.Bytes},
		Exceed:  ex, Bans: pc.Bans, Sources: pc.Sources, Evicted: pc.Evicted,
	}
}

// banLens works out the ban prefix lengths the configurations list: those
// of the rules that ban, then those of live bans (which outlive their
// rules), at most FD_BAN_LENS per family.
func (e *Engine) banLens(rules []Rule) error {
	var l4, l6 []uint8
	add := func(l *[]uint8, n uint8) bool {
		if slices.Contains(*l, n) {
			return true
		}
		if len(*l) >= banLensMax {
			return false
		}
		*l = append(*l, n)
		return true
	}
	for i := range rules {
		if lim := rules[i].Limit; lim != nil && lim.Ban != 0 {
			a, b := lim.lens()
			if !add(&l4, a) || !add(&l6, b) {
				return fmt.Errorf("rule %s: limit rules that ban use more than %d different per src lengths per family; use fewer", ruleWhere(rules[i]), banLensMax)
			}
		}
	}
	bans, err := e.readBans()
	if err != nil {
		return err
	}
	for _, b := range bans {
		if b.key.Id>>8 == 4 {
			add(&l4, uint8(b.key.Id))
		} else {
			add(&l6, uint8(b.key.Id))
		}
	}
	e.pol.lens4, e.pol.lens6 = l4, l6
	return nil
}

func packLens(l []uint8) uint32 {
	var v uint32
	for i, n := range l {
		v |= uint32(n) << (8 * i)
	}
	return v
}

// Ban is a source banned by a limit rule.
type Ban struct {
	// Source is the banned prefix (the rule's per src length).
	Source netip.Prefix `json:"source"`
	// Rule is the rule that made it, in canonical syntax; "" if that rule
	// is gone (the ban stays).
	Rule string `json:"rule"`
	// Left is how long it still lasts.
	Left time.Duration `json:"-"`
	// Dropped counts the frames it dropped.
	Dropped uint64 `json:"dropped"`
	// Since is how long ago it was made.
	Since time.Duration `json:"-"`
}

type banEntry struct {
	key gen.FastdropFdSrcKey
	val gen.FastdropFdBan
}

func (e *Engine) readBans() ([]banEntry, error) {
	var out []banEntry
	var k gen.FastdropFdSrcKey
	var v gen.FastdropFdBan
	it := e.maps[gen.FastdropMapFdBans].Iterate()
	for it.Next(&k, &v) {
		out = append(out, banEntry{k, v})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("fastdrop: read bans: %w%s", err, caps.Suffix(err, caps.Of(caps.BPF)))
	}
	return out, nil
}

// now is the program's clock (bpf_ktime_get_ns: CLOCK_MONOTONIC), or the
// test clock.
func (e *Engine) now() (uint64, error) {
	if e.testClock {
		var pe gen.FastdropFdPolice
		if err := e.maps[gen.FastdropMapFdPolicers].Lookup(uint32(0), &pe); err != nil {
			return 0, fmt.Errorf("fastdrop: read test clock: %w", err)
		}
		return pe.Tat, nil
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, fmt.Errorf("fastdrop: read the clock: %w", err)
	}
	return uint64(ts.Nano()), nil
}

// setTestClock sets the test clock (Options.testClock) to ns; the rest of
// entry 0 (ban_end) stays.
func (e *Engine) setTestClock(ns uint64) error {
	m := e.maps[gen.FastdropMapFdPolicers]
	var pe gen.FastdropFdPolice
	if err := m.Lookup(uint32(0), &pe); err != nil {
		return fmt.Errorf("fastdrop: read test clock: %w", err)
	}
	pe.Tat = ns
	return m.Put(uint32(0), &pe)
}

func banSource(k gen.FastdropFdSrcKey) netip.Prefix {
	bits := int(k.Id & 0xff)
	if k.Id>>8 == 4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(k.Hi))
		return netip.PrefixFrom(netip.AddrFrom4(b), bits)
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], k.Hi)
	binary.LittleEndian.PutUint64(b[8:], k.Lo)
	return netip.PrefixFrom(netip.AddrFrom16(b), bits)
}

// Bans lists the bans in force (not yet ended), longest left first.
func (e *Engine) Bans() ([]Ban, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.refreshLocked(); err != nil {
		return nil, err
	}
	entries, err := e.readBans()
	if err != nil {
		return nil, err
	}
	now, err := e.now()
	if err != nil {
		return nil, err
	}
	var out []Ban
	for _, b := range entries {
		if b.val.Until <= now {
			continue
		}
		ban := Ban{Source: banSource(b.key), Left: time.Duration(b.val.Until - now), Dropped: b.val.Dropped}
		if now > b.val.Since {
			ban.Since = time.Duration(now - b.val.Since)
		}
		for i, s := range e.slots {
			if s == b.val.Slot && e.rules[i].Action == ActionLimit && e.pol.epoch[s] == b.val.Epoch {
				ban.Rule = e.rules[i].String()
			}
		}
		out = append(out, ban)
	}
	slices.SortFunc(out, func(a, b Ban) int {
		if a.Left != b.Left {
			return int(b.Left - a.Left)
		}
		return a.Source.Addr().Compare(b.Source.Addr())
	})
	return out, nil
}

// Unban lifts the bans whose source prefix contains p's address or is p
// (all of them with all), and returns what it lifted.
func (e *Engine) Unban(p netip.Prefix, all bool) ([]netip.Prefix, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	entries, err := e.readBans()
	if err != nil {
		return nil, err
	}
	now, err := e.now()
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	m := e.maps[gen.FastdropMapFdBans]
	for _, b := range entries {
		src := banSource(b.key)
		if !all && src != p && !(src.Contains(p.Addr()) && p.Bits() >= src.Bits()) {
			continue
		}
		if err := m.Delete(&b.key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, fmt.Errorf("fastdrop: lift ban of %s: %w%s", src, err, caps.Suffix(err, caps.Of(caps.BPF)))
		}
		// One that had ended (the program leaves those it no longer
		// looks up) goes too, unreported.
		if b.val.Until > now {
			out = append(out, src)
		}
	}
	return out, nil
}

// encodeLimit writes the limit of r into its record b, with its police
// entry (its epoch is the record's gen_added: see assignPolice).
func encodeLimit(b []byte, l *Limit, idx uint16) {
	le := binary.LittleEndian
	le.PutUint64(b[recLimRate:], l.Rate)
	le.PutUint32(b[recLimBurst:], uint32(l.Burst))
	le.PutUint32(b[recLimBan:], uint32(l.Ban/time.Millisecond))
	le.PutUint16(b[recLimPolice:], idx)
	var f uint8
	switch l.Unit {
	case UnitBits:
		f |= uint8(gen.FastdropFdLimFlagsFD_LIM_BYTES | gen.FastdropFdLimFlagsFD_LIM_BITS)
	case UnitBytes:
		f |= uint8(gen.FastdropFdLimFlagsFD_LIM_BYTES)
	}
	if l.PerSrc {
		f |= uint8(gen.FastdropFdLimFlagsFD_LIM_PERSRC)
	}
	b[recLimFlags] = f
	b[recLimLen4], b[recLimLen6] = l.Src4Len, l.Src6Len
}

// decodeLimit reads a limit rule's record back.
func decodeLimit(b []byte) (l *Limit, idx uint16, epoch uint32) {
	epoch = binary.LittleEndian.Uint32(b[recAdded:])
	le := binary.LittleEndian
	f := b[recLimFlags]
	l = &Limit{
		Rate:    le.Uint64(b[recLimRate:]),
		Burst:   uint64(le.Uint32(b[recLimBurst:])),
		Ban:     time.Duration(le.Uint32(b[recLimBan:])) * time.Millisecond,
		PerSrc:  f&uint8(gen.FastdropFdLimFlagsFD_LIM_PERSRC) != 0,
		Src4Len: b[recLimLen4], Src6Len: b[recLimLen6],
	}
	switch {
	case f&uint8(gen.FastdropFdLimFlagsFD_LIM_BITS) != 0:
		l.Unit = UnitBits
	case f&uint8(gen.FastdropFdLimFlagsFD_LIM_BYTES) != 0:
		l.Unit = UnitBytes
	}
	return l, le.Uint16(b[recLimPolice:]), epoch
}

// PinnedBans opens the ban table pinned in pinDir (see Open), for
// CopyBans: a program loaded again (with bigger tables) keeps the bans of
// the one it replaces. The caller closes it.
func PinnedBans(pinDir string) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, gen.FastdropMapFdBans), nil)
	if err != nil {
		return nil, fmt.Errorf("fastdrop: open pinned map %s in %s: %w%s", gen.FastdropMapFdBans, pinDir, err, caps.Suffix(err, caps.Of(caps.BPF)))
	}
	return m, nil
}

// CopyBans copies the bans in force in from (another engine's ban table,
// PinnedBans) into e's, and returns how many it copied. A ban keeps its
// end, the frames it dropped and the rule that made it (by counter slot
// and epoch: a rule of the same text in the new engine is not that rule,
// so Bans shows no rule for it). Call it before Apply, so that the prefix
// lengths the bans need are looked up, and again after the new program
// replaced the old one, for bans made in between.
func (e *Engine) CopyBans(from *ebpf.Map) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if from.ValueSize() != e.maps[gen.FastdropMapFdBans].ValueSize() {
		return 0, fmt.Errorf("fastdrop: copy bans: the other program's bans are of another layout (%d bytes, not %d); they were not kept", from.ValueSize(), e.maps[gen.FastdropMapFdBans].ValueSize())
	}
	now, err := e.now()
	if err != nil {
		return 0, err
	}
	var k gen.FastdropFdSrcKey
	var v gen.FastdropFdBan
	var keys []gen.FastdropFdSrcKey
	var vals []gen.FastdropFdBan
	var end uint64
	it := from.Iterate()
	for it.Next(&k, &v) {
		if v.Until <= now {
			continue
		}
		keys, vals = append(keys, k), append(vals, v)
		end = max(end, v.End)
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("fastdrop: read the bans to keep: %w%s", err, caps.Suffix(err, caps.Of(caps.BPF)))
	}
	if len(keys) == 0 {
		return 0, nil
	}
	// The gate first (struct fd_police: only ever raised), then the bans.
	if err := raiseBanEnd(e.maps[gen.FastdropMapFdPolicers], end); err != nil {
		return 0, fmt.Errorf("fastdrop: copy bans: %w", err)
	}
	m := e.maps[gen.FastdropMapFdBans]
	for i := range keys {
		if err := m.Update(&keys[i], &vals[i], ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return i, fmt.Errorf("fastdrop: copy ban of %s: %w%s", banSource(keys[i]), err, caps.Suffix(err, caps.Of(caps.BPF)))
		}
	}
	return len(keys), nil
}

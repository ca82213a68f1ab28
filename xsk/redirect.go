package xsk

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/caps"
)

// MaxQueues is how many rx queues the redirect program serves (0..63);
// frames on higher queues always go to the kernel stack.
const MaxQueues = 64

// MaxRules is the most rules a queue's Filter may have.
const MaxRules = 8

// Action is what a queue's filter does with a frame.
type Action uint8

const (
	// ActionRedirect hands the frame to the queue's socket (or to the
	// stack when no socket is registered for the queue).
	ActionRedirect Action = iota
	// ActionPass hands the frame to the kernel stack.
	ActionPass
	// ActionDrop drops the frame.
	ActionDrop
)

func (a Action) String() string {
	switch a {
	case ActionRedirect:
		return "redirect"
	case ActionPass:
		return "pass"
	case ActionDrop:
		return "drop"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

func (a Action) kernel() (gen.RedirectXskAction, error) {
	switch a {
	case ActionRedirect:
		return gen.RedirectXskActionXSK_ACT_REDIRECT, nil
	case ActionPass:
		return gen.RedirectXskActionXSK_ACT_PASS, nil
	case ActionDrop:
		return gen.RedirectXskActionXSK_ACT_DROP, nil
	}
	return 0, fmt.Errorf("action %d: %w", a, ErrInvalidOptions)
}

// PortRange is an inclusive range of ports; a single port has Lo == Hi.
type PortRange struct{ Lo, Hi uint16 }

// Rule matches frames on all of the fields it sets. It is the subset of
// the fast-drop rule language (docs/RULES.md) that the redirect program
// evaluates itself: IPv6 extension headers are not followed (the first
// next header is the protocol), and non-first IPv4 fragments have no ports.
type Rule struct {
	Action   Action
	Proto    uint8 // L4 protocol number, when HasProto
	HasProto bool
	Src, Dst netip.Prefix // zero Prefix = any; a v4 prefix matches only IPv4 frames, v6 only IPv6
	SrcPort  *PortRange   // nil = any; frames without TCP/UDP ports never match
	DstPort  *PortRange
}

// Filter decides, for one queue, which frames go to its socket: the first
// matching rule's action, else Default (ActionRedirect in the zero value,
// so an empty Filter redirects everything).
type Filter struct {
	Rules   []Rule
	Default Action
}

// RedirectOptions configure the redirect program at load time.
type RedirectOptions struct {
	// Queues that redirect (0..63); nil selects all. Frames on other
	// queues go to the kernel stack.
	Queues []int
	// Filters per queue. When nil the program never evaluates filters
	// (the fastest path) and SetFilter is refused; when non-nil (even
	// empty) every selected queue without a filter redirects everything.
	Filters map[int]Filter
}

// Redirect is the loaded redirect program with its maps: an XSKMAP that
// Register fills with sockets, per-queue filters, and counters per queue
// and verdict. It is not attached: attach Program() with package loader
// (or link.AttachXDP).
//
// Its methods are safe for concurrent use: each is one or a few map
// operations, which the kernel makes atomic per entry.
type Redirect struct {
	objs     gen.RedirectObjects
	filtered bool
}

// NewRedirect loads the program configured by opts.
func NewRedirect(opts RedirectOptions) (*Redirect, error) {
	spec, err := gen.LoadRedirect()
	if err != nil {
		return nil, fmt.Errorf("xsk: %w", err)
	}
	mask := ^uint64(0)
	if opts.Queues != nil {
		mask = 0
		for _, q := range opts.Queues {
			if q < 0 || q >= MaxQueues {
				return nil, fmt.Errorf("xsk: redirect queue %d: %w (0 to %d)", q, ErrInvalidOptions, MaxQueues-1)
			}
			mask |= 1 << q
		}
	}
	var kfilters map[int]gen.RedirectXskFilter
	if opts.Filters != nil {
		kfilters = make(map[int]gen.RedirectXskFilter, len(opts.Filters))
		for q, f := range opts.Filters {
			if q < 0 || q >= MaxQueues {
				return nil, fmt.Errorf("xsk: filter for queue %d: %w (0 to %d)", q, ErrInvalidOptions, MaxQueues-1)
			}
			kf, err := f.compile()
			if err != nil {
				return nil, fmt.Errorf("xsk: filter for queue %d: %w", q, err)
			}
			kfilters[q] = kf
		}
	}
	if err := spec.Variables[gen.RedirectVarQueueMask].Set(mask); err != nil {
		return nil, fmt.Errorf("xsk: set queue mask: %w", err)
	}
	if err := spec.Variables[gen.RedirectVarUseFilters].Set(boolByte(opts.Filters != nil)); err != nil {
		return nil, fmt.Errorf("xsk: set filter switch: %w", err)
	}
	r := &Redirect{filtered: opts.Filters != nil}
	if err := spec.LoadAndAssign(&r.objs, nil); err != nil {
		// CAP_NET_ADMIN for the XSKMAP, CAP_PERFMON for the verifier.
		return nil, fmt.Errorf("xsk: load redirect program: %w%s", err, caps.Suffix(err, caps.Of(caps.BPF, caps.NetAdmin, caps.Perfmon)))
	}
	for q, kf := range kfilters {
		if err := r.objs.Filters.Put(uint32(q), &kf); err != nil {
			return nil, errors.Join(fmt.Errorf("xsk: write filter for queue %d: %w", q, err), r.Close())
		}
	}
	return r, nil
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// Program returns the XDP program, for attaching.
func (r *Redirect) Program() *ebpf.Program { return r.objs.XskRedirect }

// XSKMap returns the XSKMAP the program redirects into, keyed by queue.
func (r *Redirect) XSKMap() *ebpf.Map { return r.objs.Xsks }

// Register puts s into the XSKMAP slot of its queue, so frames the program
// redirects on that queue reach it. A socket already registered there is
// replaced.
func (r *Redirect) Register(s *Socket) error {
	q := s.Queue()
	if q >= MaxQueues {
		return fmt.Errorf("xsk: register socket of queue %d: %w (the program serves queues 0 to %d)", q, ErrInvalidOptions, MaxQueues-1)
	}
	if err := r.objs.Xsks.Put(uint32(q), uint32(s.Fd())); err != nil {
		return fmt.Errorf("xsk: register socket of queue %d in XSKMAP: %w", q, err)
	}
	return nil
}

// Unregister empties the XSKMAP slot of queue: its frames go to the stack.
func (r *Redirect) Unregister(queue int) error {
	if err := r.objs.Xsks.Delete(uint32(queue)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xsk: unregister queue %d: %w", queue, err)
	}
	return nil
}

// SetFilter replaces the filter of queue. The program must have been
// loaded with RedirectOptions.Filters set. The replacement is atomic per
// queue: each frame sees the old filter or the new one.
func (r *Redirect) SetFilter(queue int, f Filter) error {
	if !r.filtered {
		return fmt.Errorf("xsk: set filter for queue %d: %w (the program was loaded without filters: load it again with them)", queue, ErrInvalidOptions)
	}
	if queue < 0 || queue >= MaxQueues {
		return fmt.Errorf("xsk: set filter for queue %d: %w (0 to %d)", queue, ErrInvalidOptions, MaxQueues-1)
	}
	kf, err := f.compile()
	if err != nil {
		return fmt.Errorf("xsk: filter for queue %d: %w", queue, err)
	}
	if err := r.objs.Filters.Put(uint32(queue), &kf); err != nil {
		return fmt.Errorf("xsk: write filter for queue %d: %w", queue, err)
	}
	return nil
}

// Counter is a packet and byte count.
type Counter struct{ Packets, Bytes uint64 }

// QueueCounters are the program's verdicts on one queue, summed over CPUs.
// Redirected counts frames handed to a socket; Passed includes frames of a
// selected queue with no socket registered.
type QueueCounters struct {
	Queue                                int // MaxQueues stands for all queues above the limit
	Redirected, Passed, Dropped, Aborted Counter
}

// Counters returns the counters of queues 0..MaxQueues-1 and, last, of the
// queues above the limit.
func (r *Redirect) Counters() ([]QueueCounters, error) {
	const nv = 5 // enum verdict: ABORTED, DROP, PASS, TX, REDIRECT
	out := make([]QueueCounters, MaxQueues+1)
	var per []gen.RedirectCounter
	for q := range out {
		out[q].Queue = q
		for v := range nv {
			if err := r.objs.QueueVerdicts.Lookup(uint32(q*nv+v), &per); err != nil {
				return nil, fmt.Errorf("xsk: read counters of queue %d: %w", q, err)
			}
			var sum Counter
			for _, c := range per {
				sum.Packets += c.Packets
				sum.Bytes += c.Bytes
			}
			switch gen.BasicVerdict(v) {
			case gen.BasicVerdictVERDICT_ABORTED:
				out[q].Aborted = sum
			case gen.BasicVerdictVERDICT_DROP:
				out[q].Dropped = sum
			case gen.BasicVerdictVERDICT_PASS:
				out[q].Passed = sum
			case gen.BasicVerdictVERDICT_REDIRECT:
				out[q].Redirected = sum
			}
		}
	}
	return out, nil
}

// Close releases the program and its maps. An attachment keeps the
// program alive until it is detached.
func (r *Redirect) Close() error {
	if err := r.objs.Close(); err != nil {
		return fmt.Errorf("xsk: close redirect program: %w", err)
	}
	return nil
}

// compile turns f into the kernel's layout, checking it.
func (f Filter) compile() (gen.RedirectXskFilter, error) {
	var kf gen.RedirectXskFilter
	if len(f.Rules) > MaxRules {
		return kf, fmt.Errorf("%d rules: %w (at most %d per queue)", len(f.Rules), ErrInvalidOptions, MaxRules)
	}
	var err error
	if kf.Dflt, err = f.Default.kernel(); err != nil {
		return kf, fmt.Errorf("default: %w", err)
	}
	kf.Nrules = uint32(len(f.Rules))
	for i, r := range f.Rules {
		if kf.Rules[i], err = r.compile(); err != nil {
			return kf, fmt.Errorf("rule %d: %w", i+1, err)
		}
	}
	return kf, nil
}

func (r Rule) compile() (gen.RedirectXskRule, error) {
	var k gen.RedirectXskRule
	var err error
	if k.Action, err = r.Action.kernel(); err != nil {
		return k, err
	}
	if r.HasProto {
		k.Match |= gen.RedirectXskMatchXSK_M_PROTO
		k.Proto = r.Proto
	}
	family := 0
	for _, p := range []struct {
		pfx       netip.Prefix
		bit       gen.RedirectXskMatch
		addr, msk *[4]uint32
		name      string
	}{
		{r.Src, gen.RedirectXskMatchXSK_M_SRC, &k.Src, &k.SrcMask, "src"},
		{r.Dst, gen.RedirectXskMatchXSK_M_DST, &k.Dst, &k.DstMask, "dst"},
	} {
		if !p.pfx.IsValid() {
			continue
		}
		pfx := p.pfx.Masked()
		if pfx.Addr().Is4In6() {
			return k, fmt.Errorf("%s %v: %w (use the plain IPv4 form)", p.name, p.pfx, ErrInvalidOptions)
		}
		f := 6
		if pfx.Addr().Is4() {
			f = 4
		}
		if family != 0 && family != f {
			return k, fmt.Errorf("src and dst of different families: %w", ErrInvalidOptions)
		}
		family = f
		k.Match |= p.bit
		addr := pfx.Addr().AsSlice()
		for i := range len(addr) / 4 {
			bits := min(max(pfx.Bits()-32*i, 0), 32)
			var m uint32
			if bits > 0 {
				m = ^uint32(0) << (32 - bits)
			}
			// Words are compared as the kernel loads them from the packet:
			// network-order bytes read as a little-endian (host) u32.
			p.msk[i] = hostWord(m)
			p.addr[i] = hostWord(be32(addr[4*i:])) & p.msk[i]
		}
	}
	switch family {
	case 4:
		k.Match |= gen.RedirectXskMatchXSK_M_IPV4
	case 6:
		k.Match |= gen.RedirectXskMatchXSK_M_IPV6
	}
	for _, p := range []struct {
		rng    *PortRange
		bit    gen.RedirectXskMatch
		lo, hi *uint16
		name   string
	}{
		{r.SrcPort, gen.RedirectXskMatchXSK_M_SPORT, &k.SportLo, &k.SportHi, "sport"},
		{r.DstPort, gen.RedirectXskMatchXSK_M_DPORT, &k.DportLo, &k.DportHi, "dport"},
	} {
		if p.rng == nil {
			continue
		}
		if p.rng.Lo > p.rng.Hi {
			return k, fmt.Errorf("%s %d-%d: %w (low above high)", p.name, p.rng.Lo, p.rng.Hi, ErrInvalidOptions)
		}
		if !r.HasProto || (r.Proto != 6 && r.Proto != 17) {
			return k, fmt.Errorf("%s needs proto tcp (6) or udp (17): %w", p.name, ErrInvalidOptions)
		}
		k.Match |= p.bit
		*p.lo, *p.hi = p.rng.Lo, p.rng.Hi
	}
	return k, nil
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// hostWord converts a big-endian value to the u32 the BPF program sees
// when it loads the same four bytes from the packet on this (little-endian,
// as gen's build tags require) host.
func hostWord(v uint32) uint32 {
	return v>>24 | v>>8&0xff00 | v<<8&0xff0000 | v<<24
}

package xsk

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/caps"
)

// MaxQueues is how many rx queues the redirect program serves (0..63);
// frames on higher queues always go to the kernel stack.
const MaxQueues = 64

// RedirectOptions configure the redirect program at load time.
type RedirectOptions struct {
	// Queues that redirect (0..63); nil selects all. Frames on other
	// queues go to the kernel stack.
	Queues []int
}

// Redirect is the plain AF_XDP program (bpf/redirect.c) with its maps: an
// XSKMAP that Register fills with sockets, and counters per queue and
// verdict. It matches no rules: every frame of a selected queue goes to
// that queue's socket, the one-line program of libxdp and xdpsock, which
// the benchmarks and examples measure. To choose frames by rules, register
// the sockets with a fastdrop.Engine instead (its redirect action and
// queue field; see SocketRegistry). It is not attached: attach Program()
// with package loader (or link.AttachXDP).
//
// Its methods are safe for concurrent use: each is one or a few map
// operations, which the kernel makes atomic per entry.
type Redirect struct {
	objs gen.RedirectObjects
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
	if err := spec.Variables[gen.RedirectVarQueueMask].Set(mask); err != nil {
		return nil, fmt.Errorf("xsk: set queue mask: %w", err)
	}
	r := &Redirect{}
	if err := spec.LoadAndAssign(&r.objs, nil); err != nil {
		// CAP_NET_ADMIN for the XSKMAP, CAP_PERFMON for the verifier.
		return nil, fmt.Errorf("xsk: load redirect program: %w%s", err, caps.Suffix(err, caps.Of(caps.BPF, caps.NetAdmin, caps.Perfmon)))
	}
	return r, nil
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

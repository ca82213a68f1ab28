package fastdrop

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// traceLen is the size of struct fd_trace_rec, which the program built with
// trace on prepends to every frame it returns from a test run.
const traceLen = 8

// maxLinear is what a test run puts in a frame's first buffer: a page less
// the XDP headroom and struct skb_shared_info (on x86-64); the rest of a
// longer frame goes into further buffers.
const maxLinear = 4096 - 256 - 320

// ethHeader is the shortest frame an XDP test run takes (and a driver
// hands to XDP).
const ethHeader = 14

// ErrFrameSize is returned by Tester.Test for frames longer than an XDP test
// run takes (it hands a frame over in at most 1 + MAX_SKB_FRAGS buffers of
// a page: 73,152 bytes with the default 17). Jumbo frames are run as
// multi-buffer XDP, as a driver hands them to the attached program.
var ErrFrameSize = errors.New("frame size outside what an XDP test run takes")

// ErrCutHeaders is returned by Tester.TestCaptured for a frame that a
// capture's snap length cut inside the headers the program reads: its
// verdict cannot be known.
var ErrCutHeaders = errors.New("cut inside its headers")

// Tester runs frames through the exact fast-drop program, compiled from a
// rule set into the same maps an attached program reads, with
// BPF_PROG_TEST_RUN: no interface is touched. It tells, per frame, the
// verdict and which rule decided. It is what `xdpdrop test` uses to check a
// rule set against a capture before it goes live. Safe for concurrent use.
type Tester struct {
	e         *Engine
	malformed Action // the rule set's verdict for malformed frames

	mu     sync.Mutex
	ruleOf map[uint32]int // counter slot -> index in the rule set
	out    []byte
	padded []byte // TestCaptured's frame, padded to its length
	// With limit rules, the program runs on a clock that SetTime sets:
	// base is the first time given, which the clock shows as clockStart.
	clock bool
	base  time.Time
}

// clockStart is the program's clock at a Tester's first SetTime: any time
// well after 0, so that the buckets start full.
const clockStart = time.Hour

// NewTester loads the program with tracing on and applies rs.
func NewTester(rs *RuleSet) (*Tester, error) {
	opts := CapacityFor(rs, 1)
	opts.trace = true
	for i := range rs.Rules {
		if rs.Rules[i].Action == ActionLimit {
			// The clock seen in the kernel's steps of a tick, with
			// every bucket a tick deeper (bpf/fastdrop.h, fd_pol_now),
			// as the attached program sees jiffies: the verdicts are
			// those the kernel would give, up to the phase of its
			// ticks, where an exact clock would pass up to a tick's
			// worth fewer frames after each step.
			opts.testClock, opts.testTicks = true, true
		}
	}
	e, err := New(opts)
	if err != nil {
		return nil, err
	}
	if err := e.Apply(rs); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	t := &Tester{e: e, malformed: rs.EffectiveMalformed(), ruleOf: make(map[uint32]int), out: make([]byte, 4096), clock: opts.testClock}
	if t.clock {
		if err := e.setTestClock(uint64(clockStart)); err != nil {
			return nil, errors.Join(fmt.Errorf("fastdrop: set the clock: %w", err), e.Close())
		}
	}
	e.mu.Lock()
	for i, s := range e.slots {
		t.ruleOf[s] = i
	}
	e.mu.Unlock()
	return t, nil
}

// SetTime sets the time the next frames arrive at, for limit rules (a
// capture's timestamps: limits are evaluated against the capture's own
// clock). Only differences between the times count; a time before the
// first one given counts as that one. Without limit rules it does nothing.
// Without SetTime, every frame arrives at the same instant.
func (t *Tester) SetTime(at time.Time) error {
	if !t.clock {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.base.IsZero() {
		t.base = at
	}
	d := max(at.Sub(t.base), 0)
	if err := t.e.setTestClock(uint64(clockStart + d)); err != nil {
		return fmt.Errorf("fastdrop: set the clock: %w", err)
	}
	return nil
}

// Test runs one frame through the program and returns its verdict, the
// stage that decided (malformed, compound rule, prefix rule, default
// policy) and the index of the rule in the rule set (-1 for none).
//
// A frame shorter than an Ethernet header is malformed (docs/RULES.md);
// the kernel takes no such frame into a test run, and no driver hands one
// to XDP, so Test judges it without the program and it is in no counter.
func (t *Tester) Test(frame []byte) (Result, error) {
	if len(frame) < ethHeader {
		return Result{Verdict: t.malformed, Class: ClassMalformed, Rule: -1}, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.test(frame, nil)
}

// TestOn is Test for a frame that arrives on rx queue queue of the
// interface with index ifindex (a test run takes a queue only with a
// device that has it). Redirect rules and policies give ActionRedirect;
// the frame goes to the stack in the run unless a socket is registered
// for the queue (RegisterSocket on the Tester's engine, see Engine).
func (t *Tester) TestOn(frame []byte, ifindex, queue int) (Result, error) {
	if len(frame) < ethHeader {
		return Result{Verdict: t.malformed, Class: ClassMalformed, Rule: -1}, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.test(frame, &xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifindex), RxQueueIndex: uint32(queue)})
}

// Engine returns the engine the Tester runs frames through, for
// registering sockets. Changing its rules makes the Tester's rule indexes
// wrong.
func (t *Tester) Engine() *Engine { return t.e }

// xdpMD is struct xdp_md, the context of an XDP test run.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// TestCaptured is Test for a frame of length bytes of which a capture kept
// only data (the first bytes, as a snap length cuts them): it judges the
// frame at its length, as the attached program would have, by padding data
// with zeros. The verdict depends only on the headers and the length
// (HeaderExtent), so it is the whole frame's when the headers are all in
// data; when the cut falls inside them it returns ErrCutHeaders.
func (t *Tester) TestCaptured(data []byte, length int) (Result, error) {
	if length <= len(data) {
		return t.Test(data)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.padded = append(append(t.padded[:0], data...), make([]byte, length-len(data))...)
	if ext := HeaderExtent(t.padded); ext > len(data) {
		return Result{Rule: -1}, fmt.Errorf("%d of %d bytes captured, the headers need %d: %w", len(data), length, ext, ErrCutHeaders)
	}
	if length < ethHeader {
		return Result{Verdict: t.malformed, Class: ClassMalformed, Rule: -1}, nil
	}
	return t.test(t.padded, nil)
}

// test runs frame through the program, with ctx if not nil; t.mu is held.
func (t *Tester) test(frame []byte, ctx *xdpMD) (Result, error) {
	if need := len(frame) + traceLen; need > len(t.out) {
		t.out = make([]byte, need)
	}
	opts := &ebpf.RunOptions{Data: frame, DataOut: t.out}
	if ctx != nil {
		opts.Context = *ctx
	}
	ret, err := t.e.prog.Run(opts)
	if (errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EINVAL)) && len(frame) > maxLinear {
		// Out of buffers (MAX_SKB_FRAGS): no driver hands such a frame
		// to XDP either.
		return Result{Rule: -1}, fmt.Errorf("%d bytes: %w", len(frame), ErrFrameSize)
	}
	if err != nil {
		return Result{Rule: -1}, fmt.Errorf("fastdrop: test run of a %d-byte frame: %w", len(frame), err)
	}
	tr := t.out[:traceLen]
	if tr[0] != 0xfd {
		return Result{Rule: -1}, errors.New("fastdrop: the program returned no trace record")
	}
	val := uint32(tr[4]) | uint32(tr[5])<<8 | uint32(tr[6])<<16 | uint32(tr[7])<<24
	res := Result{Verdict: valAction(val), Class: ResultClass(tr[2]), Rule: -1}
	// The XDP action must be the one of the val's action: redirect goes
	// to a socket (XDP_REDIRECT) or, with none bound, to the stack.
	want := map[Action][]uint32{ActionDrop: {1}, ActionPass: {2}, ActionRedirect: {2, 4}}[res.Verdict]
	if !slices.Contains(want, ret) {
		return res, fmt.Errorf("fastdrop: the program returned XDP action %d for action %s", ret, res.Verdict)
	}
	if res.Class == ClassCompound || res.Class == ClassPrefix {
		i, ok := t.ruleOf[valSlot(val)]
		if !ok {
			return res, fmt.Errorf("fastdrop: matched counter slot %d, which is no rule's", valSlot(val))
		}
		res.Rule = i
	}
	return res, nil
}

// Counters are the program's counters over every frame tested so far.
func (t *Tester) Counters() (*Counters, error) { return t.e.Counters() }

// Close releases the program and its maps.
func (t *Tester) Close() error { return t.e.Close() }

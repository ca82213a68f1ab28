package fastdrop

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
)

// traceLen is the size of struct fd_trace_rec, which the program built with
// trace on prepends to every frame it returns from a test run.
const traceLen = 8

// ErrFrameSize is returned by Tester.Test for frames shorter than an
// Ethernet header, which the kernel's test run refuses (and no driver hands
// to XDP). Jumbo frames are run as multi-buffer XDP.
var ErrFrameSize = errors.New("frame size outside what an XDP test run takes")

// Tester runs frames through the exact fast-drop program, compiled from a
// rule set into the same maps an attached program reads, with
// BPF_PROG_TEST_RUN: no interface is touched. It tells, per frame, the
// verdict and which rule decided. It is what `xdpdrop test` uses to check a
// rule set against a capture before it goes live. Safe for concurrent use.
type Tester struct {
	e *Engine

	mu     sync.Mutex
	ruleOf map[uint32]int // counter slot -> index in the rule set
	out    []byte
}

// NewTester loads the program with tracing on and applies rs.
func NewTester(rs *RuleSet) (*Tester, error) {
	opts := CapacityFor(rs, 1)
	opts.trace = true
	e, err := New(opts)
	if err != nil {
		return nil, err
	}
	if err := e.Apply(rs); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	t := &Tester{e: e, ruleOf: make(map[uint32]int), out: make([]byte, 4096)}
	e.mu.Lock()
	for i, s := range e.slots {
		t.ruleOf[s] = i
	}
	e.mu.Unlock()
	return t, nil
}

// Test runs one frame through the program and returns its verdict, the
// stage that decided (malformed, compound rule, prefix rule, default
// policy) and the index of the rule in the rule set (-1 for none).
func (t *Tester) Test(frame []byte) (Result, error) {
	if len(frame) < 14 {
		return Result{Rule: -1}, fmt.Errorf("%d bytes: %w", len(frame), ErrFrameSize)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if need := len(frame) + traceLen; need > len(t.out) {
		t.out = make([]byte, need)
	}
	ret, err := t.e.prog.Run(&ebpf.RunOptions{Data: frame, DataOut: t.out})
	if err != nil {
		return Result{Rule: -1}, fmt.Errorf("fastdrop: test run of a %d-byte frame: %w", len(frame), err)
	}
	tr := t.out[:traceLen]
	if tr[0] != 0xfd {
		return Result{Rule: -1}, errors.New("fastdrop: the program returned no trace record")
	}
	res := Result{Class: ResultClass(tr[2]), Rule: -1}
	switch ret {
	case 1: // XDP_DROP
		res.Verdict = ActionDrop
	case 2: // XDP_PASS
		res.Verdict = ActionPass
	default:
		return res, fmt.Errorf("fastdrop: the program returned XDP action %d", ret)
	}
	if res.Class == ClassCompound || res.Class == ClassPrefix {
		val := uint32(tr[4]) | uint32(tr[5])<<8 | uint32(tr[6])<<16 | uint32(tr[7])<<24
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

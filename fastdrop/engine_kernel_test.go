package fastdrop

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// testOptions keep kernel memory small: tests create many engines.
var testOptions = Options{MaxRules: 4096, IPv4Blocks: 256, IPv6Entries: 4096}

// newTestEngine loads the program with tracing on (each test run tells
// which stage and rule decided).
func newTestEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	testenv.RequireRoot(t)
	opts.trace = true
	e, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// kernelResult is what a traced test run reports, in the Model's terms.
type kernelResult struct {
	Result
	xdp uint32 // the program's return value
}

func (r kernelResult) String() string {
	return fmt.Sprintf("%s/%s/rule %d (xdp %d)", r.Verdict, r.Class, r.Rule, r.xdp)
}

// runner runs frames through an engine's traced program and maps counter
// slots back to rule indices.
type runner struct {
	e      *Engine
	ruleOf map[uint32]int
	out    []byte
}

func newRunner(e *Engine) *runner {
	r := &runner{e: e, ruleOf: make(map[uint32]int), out: make([]byte, 4096)}
	for i, s := range e.slots {
		r.ruleOf[s] = i
	}
	return r
}

// run returns the kernel's decision for frame (at least 14 bytes: the
// test run refuses shorter frames).
func (r *runner) run(frame []byte) (kernelResult, error) {
	ret, err := r.e.prog.Run(&ebpf.RunOptions{Data: frame, DataOut: r.out})
	if err != nil {
		return kernelResult{}, fmt.Errorf("test run: %w", err)
	}
	tr := r.out[:8]
	if tr[0] != 0xfd {
		return kernelResult{}, errors.New("no trace record in the output frame")
	}
	var res kernelResult
	res.xdp = ret
	switch tr[1] {
	case 1:
		res.Verdict = ActionDrop
	case 2:
		res.Verdict = ActionPass
	default:
		res.Verdict = Action(100 + tr[1])
	}
	if uint32(tr[1]) != ret {
		return res, fmt.Errorf("trace says verdict %d, program returned %d", tr[1], ret)
	}
	res.Class = ResultClass(tr[2])
	res.Rule = -1
	val := uint32(tr[4]) | uint32(tr[5])<<8 | uint32(tr[6])<<16 | uint32(tr[7])<<24
	if res.Class == ClassCompound || res.Class == ClassPrefix {
		i, ok := r.ruleOf[valSlot(val)]
		if !ok {
			return res, fmt.Errorf("matched counter slot %d, which is no rule's", valSlot(val))
		}
		res.Rule = i
		if valAction(val) != res.Verdict {
			return res, fmt.Errorf("val action %s, verdict %s", valAction(val), res.Verdict)
		}
	}
	return res, nil
}

func kParse(t testing.TB, text string) *RuleSet {
	t.Helper()
	rs, err := Parse(strings.NewReader(text), "test.rules")
	if err != nil {
		t.Fatalf("parse rules: %v", err)
	}
	return rs
}

func mustApply(t testing.TB, e *Engine, rs *RuleSet) *runner {
	t.Helper()
	if err := e.Apply(rs); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return newRunner(e)
}

func TestEngineSmoke(t *testing.T) {
	e := newTestEngine(t, testOptions)
	r := mustApply(t, e, kParse(t, `
drop udp dport 11211
drop src 192.0.2.0/24
pass src 192.0.2.128/25
drop src 2001:db8::/32
`))
	for _, tc := range []struct {
		name  string
		frame frames.Frame
		want  Result
	}{
		{"memcached", frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 11211, 10), Result{ActionDrop, ClassCompound, 0}},
		{"prefix /24", frames.UDP4("192.0.2.1", "10.0.0.1", 1000, 53, 10), Result{ActionDrop, ClassPrefix, 1}},
		{"prefix /25", frames.UDP4("192.0.2.200", "10.0.0.1", 1000, 53, 10), Result{ActionPass, ClassPrefix, 2}},
		{"v6 prefix", frames.UDP6("2001:db8::1", "2001:db8::2", 1000, 53, 10), Result{ActionDrop, ClassPrefix, 3}},
		{"default", frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 53, 10), Result{ActionPass, ClassDefault, -1}},
	} {
		got, err := r.run(tc.frame.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got.Result != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	_ = netip.Prefix{}
}

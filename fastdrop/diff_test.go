package fastdrop

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

var (
	diffSeed   = flag.Uint64("fastdrop.seed", 20240601, "seed of TestDifferential")
	diffFrames = flag.Int("fastdrop.frames", 0, "frames TestDifferential checks (0: 200,000, or 20,000 with -short)")
)

// diffGen draws rule sets and frames that have a fair chance of matching
// each other: addresses, ports and protocols come from small pools that
// both use, so rules nest, overlap and hit.
type diffGen struct {
	rng    *rand.Rand
	hosts4 []netip.Addr
	hosts6 []netip.Addr
	ports  []uint16
	// plain: compound rules only of the first matcher's fields and
	// actions, for the program's plain path (fd_conf.features 0).
	plain bool
	// dst: ruleSet adds destination prefix rules to some sets (the
	// engine must have the table: Options.DstPrefixes).
	dst bool
}

func newDiffGen(seed uint64) *diffGen {
	g := &diffGen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for range 6 {
		var a4 [4]byte
		var a6 [16]byte
		for i := range a4 {
			a4[i] = byte(g.rng.Uint32())
		}
		for i := range a6 {
			a6[i] = byte(g.rng.Uint32())
		}
		g.hosts4 = append(g.hosts4, netip.AddrFrom4(a4))
		g.hosts6 = append(g.hosts6, netip.AddrFrom16(a6))
	}
	g.ports = []uint16{0, 1, 53, 80, 443, 1023, 1024, 11211, 65535, uint16(g.rng.Uint32())}
	return g
}

// near returns an address that shares a random number of leading bits
// with one of the pool's hosts.
func (g *diffGen) near(v6 bool) netip.Addr {
	pool := g.hosts4
	if v6 {
		pool = g.hosts6
	}
	a := pool[g.rng.IntN(len(pool))].AsSlice()
	keep := g.rng.IntN(len(a)*8 + 1)
	if g.rng.IntN(3) == 0 {
		keep = len(a) * 8 // the host itself
	}
	for bit := keep; bit < len(a)*8; bit++ {
		if g.rng.IntN(2) == 0 {
			a[bit/8] ^= 0x80 >> (bit % 8)
		}
	}
	addr, _ := netip.AddrFromSlice(a)
	return addr
}

func (g *diffGen) port() uint16 {
	if g.rng.IntN(4) == 0 {
		return uint16(g.rng.Uint32())
	}
	return g.ports[g.rng.IntN(len(g.ports))]
}

// frame returns a random frame, usually from the pools, sometimes mutated
// or cut short.
func (g *diffGen) frame() []byte {
	s := frames.Random(g.rng)
	if s.Src.IsValid() && g.rng.IntN(5) != 0 {
		v6 := s.Src.Is6()
		s.Src, s.Dst = g.near(v6), g.near(v6)
	}
	if s.SrcPort != 0 || s.DstPort != 0 {
		s.SrcPort, s.DstPort = g.port(), g.port()
	}
	if g.rng.IntN(2) == 0 {
		s.TTL = g.ttl()
	}
	if g.rng.IntN(2) == 0 {
		s.FlowLabel = g.flowLabel()
	}
	if g.rng.IntN(2) == 0 {
		s.TOS = g.dscp()<<2 | uint8(g.rng.IntN(4))
	}
	if g.rng.IntN(3) == 0 && s.Src.IsValid() {
		s.Payload = frames.Pattern(g.rng.IntN(diffMaxLen))
	}
	if g.rng.IntN(3) == 0 && s.Src.Is4() {
		s.IPv4MoreFragments, s.IPv4DontFragment = g.rng.IntN(2) == 0, g.rng.IntN(2) == 0
	}
	f := s.Build()
	if s.Proto == ProtoTCP && f.L4 >= 0 && f.L4+14 <= len(f.Bytes) && g.rng.IntN(2) == 0 {
		f.Bytes[f.L4+13] = g.flagByte()
	}
	switch n := g.rng.IntN(10); {
	case n < 2:
		return frames.Mutate(g.rng, f)
	case n < 3:
		return f.Truncate(g.rng.IntN(len(f.Bytes) + 1)).Bytes
	}
	return f.Bytes
}

var diffProtos = []uint8{ProtoTCP, ProtoUDP, ProtoICMP, ProtoICMPv6, 47, 50, 132, 0, 59}

func (g *diffGen) prefix(v6 bool) netip.Prefix {
	a := g.near(v6)
	// Mostly the longer half (the common case, and short IPv4 prefixes
	// cover millions of DIR-24-8 entries, which makes every change slow).
	bits := a.BitLen() - g.rng.IntN(a.BitLen()/2+1)
	if g.rng.IntN(8) == 0 {
		bits = g.rng.IntN(a.BitLen() + 1)
	}
	p, _ := a.Prefix(bits)
	return p
}

// num returns a random value of a numeric field: one to four items
// (values, ranges, comparisons; none overlapping), drawn by pick, and
// sometimes negated; named, if set, says whether a value may be written
// by its name.
func (g *diffGen) num(spec *numSpec, pick func() uint32, named func(v uint32) bool) Num {
	var n Num
	for range 1 + g.rng.IntN(4)*g.rng.IntN(2) {
		a, b := pick(), pick()
		it := NumItem{Lo: min(a, b), Hi: max(a, b), Op: CmpRange}
		switch g.rng.IntN(6) {
		case 0, 1:
			it.Hi = it.Lo
			if named != nil && named(it.Lo) && g.rng.IntN(2) == 0 {
				it.Named = true
			}
		case 2:
			if a < spec.max && a <= spec.writeMax {
				it = NumItem{Lo: a + 1, Hi: spec.max, Op: CmpGT}
			}
		case 3:
			if a <= spec.writeMax {
				it = NumItem{Lo: a, Hi: spec.max, Op: CmpGE}
			}
		case 4:
			if a > 0 {
				it = NumItem{Lo: 0, Hi: a - 1, Op: []CmpOp{CmpLT, CmpLE}[g.rng.IntN(2)]}
				if it.Op == CmpLE {
					it.Hi = a
				}
			}
		}
		ok := it.Hi <= spec.max && (it.Op != CmpRange || it.Hi <= spec.writeMax)
		for _, o := range n.Items {
			if it.Lo <= o.Hi && o.Lo <= it.Hi {
				ok = false
			}
		}
		if ok {
			n.Items = append(n.Items, it)
		}
	}
	if len(n.Items) == 0 {
		v := pick()
		n.Items = []NumItem{{Lo: v, Hi: v, Op: CmpRange}}
	}
	n.Not = g.rng.IntN(4) == 0
	return n
}

func (g *diffGen) portNum() Num {
	return g.num(&diffPortSpec, func() uint32 { return uint32(g.port()) }, nil)
}

var diffPortSpec = portSpec("port")

// diffFlowLabels are the flow labels rules and frames are drawn from.
var diffFlowLabels = []uint32{0, 1, 7, 0x100, 0x12345, 0x80000, 0xffffe, 0xfffff}

func (g *diffGen) flowLabel() uint32 {
	if g.rng.IntN(4) == 0 {
		return g.rng.Uint32() & 0xfffff
	}
	return diffFlowLabels[g.rng.IntN(len(diffFlowLabels))]
}

// diffTTLs are the TTLs and hop limits rules and frames are drawn from
// (frames.Spec cannot make 0; mutated frames can).
var diffTTLs = []uint8{1, 2, 3, 63, 64, 65, 128, 254, 255}

func (g *diffGen) ttl() uint8 {
	if g.rng.IntN(4) == 0 {
		return uint8(g.rng.Uint32())
	}
	return diffTTLs[g.rng.IntN(len(diffTTLs))]
}

// diffFlags are the TCP flag bytes rules and frames are drawn from: those
// of attacks and scans, then any.
var diffFlags = []uint8{0x02, 0x12, 0x10, 0x04, 0x14, 0x01, 0x11, 0x29, 0x00, 0xff, 0x18, 0xc2}

func (g *diffGen) flagByte() uint8 {
	if g.rng.IntN(4) == 0 {
		return uint8(g.rng.Uint32())
	}
	return diffFlags[g.rng.IntN(len(diffFlags))]
}

func (g *diffGen) tcpFlags() *TCPFlags {
	if g.rng.IntN(4) == 0 {
		return &TCPFlags{Set: g.flagByte(), Exact: true}
	}
	set := g.flagByte()
	clear := g.flagByte() &^ set
	if g.rng.IntN(2) == 0 {
		clear = 0
	}
	return &TCPFlags{Set: set, Clear: clear}
}

// fragBits returns random fragment bits (maybe ones that never match,
// which Validate refuses and compound draws again).
func (g *diffGen) fragBits() *FragBits {
	f := &FragBits{}
	for _, n := range fragNames {
		switch g.rng.IntN(4) {
		case 0:
			f.Set |= n.bit
		case 1:
			f.Clear |= n.bit
		}
	}
	return f
}

// diffMaxLen bounds the payloads of frames and the lengths len rules
// name, so that the two meet.
const diffMaxLen = 1200

// diffDSCPs are the codepoints rules and frames are drawn from.
var diffDSCPs = []uint8{0, 8, 10, 26, 34, 46, 48, 63}

func (g *diffGen) dscp() uint8 {
	if g.rng.IntN(4) == 0 {
		return uint8(g.rng.IntN(64))
	}
	return diffDSCPs[g.rng.IntN(len(diffDSCPs))]
}

// diffQueues are the rx queues of the veth the differential tests run
// frames on; rules name queues up to diffQueues+1, so some match none.
const diffQueues = 8

// action returns a random action: drop, pass or redirect.
func (g *diffGen) action() Action { return Action(1 + g.rng.IntN(3)) }

// origin returns a random origin: mostly the default, sometimes another
// or a late one, so that the order of origins is tested too.
func (g *diffGen) origin() string {
	switch g.rng.IntN(6) {
	case 0:
		return OriginRedirect
	case 1:
		return "bgp"
	}
	return ""
}

// compound returns a random valid compound rule.
func (g *diffGen) compound() Rule {
	for {
		r := Rule{Action: g.action(), Origin: g.origin()}
		if g.rng.IntN(8) == 0 {
			// A limit rule: which rule decides must agree; its verdict
			// depends on time and the frames before (diffCheck). No ban:
			// a ban would decide a source's later frames before the
			// rules, which the model does not know.
			r.Action = ActionLimit
			r.Limit = &Limit{Rate: 1000, PerSrc: g.rng.IntN(2) == 0}
		}
		v6 := g.rng.IntN(2) == 0
		if g.rng.IntN(3) == 0 {
			r.Src = g.prefix(v6)
		}
		if g.rng.IntN(4) == 0 {
			r.Dst = g.prefix(v6)
		}
		if g.rng.IntN(2) == 0 {
			r.HasProto = true
			r.Proto = diffProtos[g.rng.IntN(len(diffProtos))]
			if g.rng.IntN(3) == 0 {
				r.Proto = uint8(g.rng.Uint32())
			}
		}
		if !r.HasProto && g.rng.IntN(5) == 0 {
			// A list of protocols (with ports, only TCP and UDP).
			r.nums().Proto = g.num(&protoSpec, func() uint32 { return uint32(diffProtos[g.rng.IntN(len(diffProtos))]) },
				func(v uint32) bool { return protoName(uint8(v)) != "" })
		}
		if r.protoOnly(func(p uint8) bool { return p == ProtoTCP || p == ProtoUDP }) {
			if g.rng.IntN(2) == 0 {
				r.nums().Sport = g.portNum()
			}
			if g.rng.IntN(2) == 0 {
				r.nums().Dport = g.portNum()
			}
			if g.rng.IntN(3) == 0 {
				r.nums().Port = g.portNum()
			}
		}
		if g.rng.IntN(8) == 0 {
			r.EtherType = []uint16{EtherTypeIPv4, EtherTypeIPv6, EtherTypeARP, EtherTypeLLDP, 0x88b5}[g.rng.IntN(5)]
		}
		if r.Nums == nil && g.rng.IntN(6) == 0 {
			r.Fragment = true
		}
		if g.rng.IntN(5) == 0 {
			r.nums().TTL = g.num(matchFields[fieldIndex("ttl")].num, func() uint32 { return uint32(g.ttl()) }, nil)
		}
		if r.HasProto && r.Proto == ProtoTCP && g.rng.IntN(2) == 0 {
			r.TCPFlags = g.tcpFlags()
		}
		if r.HasProto && (r.Proto == ProtoICMP || r.Proto == ProtoICMPv6) && !r.Fragment {
			types := []uint32{0, 3, 8, 11, 1, 128, 129, 135}
			if g.rng.IntN(2) == 0 {
				r.nums().Type = g.num(matchFields[fieldIndex("type")].num, func() uint32 { return types[g.rng.IntN(len(types))] },
					func(v uint32) bool { return icmpTypeName(r.Proto, uint8(v)) != "" })
			}
			if g.rng.IntN(3) == 0 {
				r.nums().Code = g.num(matchFields[fieldIndex("code")].num, func() uint32 { return uint32(g.rng.IntN(16)) }, nil)
			}
		}
		if g.rng.IntN(6) == 0 {
			r.nums().DSCP = g.num(matchFields[fieldIndex("dscp")].num, func() uint32 { return uint32(g.dscp()) },
				func(v uint32) bool { return dscpName(uint8(v)) != "" })
		}
		if g.rng.IntN(6) == 0 {
			r.nums().Len = g.num(&lenSpec, func() uint32 { return uint32(g.rng.IntN(diffMaxLen)) }, nil)
		}
		if g.rng.IntN(6) == 0 && !r.Fragment {
			r.FragBits = *g.fragBits()
		}
		if g.rng.IntN(3) == 0 {
			r.nums().Queue = g.num(matchFields[fieldIndex("queue")].num, func() uint32 { return uint32(g.rng.IntN(diffQueues + 2)) }, nil)
		}
		if g.rng.IntN(6) == 0 && r.family() != 4 {
			r.nums().FlowLabel = g.num(matchFields[fieldIndex("flowlabel")].num, g.flowLabel, nil)
			if g.rng.IntN(2) == 0 {
				for i := range r.Nums.FlowLabel.Items {
					r.Nums.FlowLabel.Items[i].Hex = true
				}
			}
		}
		if g.plain {
			plainRule(&r)
		}
		if r.IsPrefixOnly() || r.Validate() != nil {
			continue
		}
		return r
	}
}

// plainRule keeps of r only what the program's plain path handles (see
// FD_FLD_PLAIN and FD_FEAT_* in bpf/fastdrop.h): addresses, protocol,
// ports, EtherType and non-first fragments; no limit and no late origin.
func plainRule(r *Rule) {
	if r.Action == ActionLimit {
		r.Action, r.Limit = ActionDrop, nil
	}
	if r.Origin == OriginRedirect {
		r.Origin = ""
	}
	r.TCPFlags, r.FragBits = nil, FragBits{}
	if r.Nums != nil {
		n := r.Nums.Clone()
		n.Port, n.Len, n.TTL, n.DSCP, n.Type, n.Code, n.Queue, n.FlowLabel = Num{}, Num{}, Num{}, Num{}, Num{}, Num{}, Num{}, Num{}
		r.Nums = n
		if !n.Sport.IsSet() && !n.Dport.IsSet() && !n.Proto.IsSet() {
			r.Nums = nil
		}
	}
}

// activeFeatures is fd_conf.features of e's half in force.
func activeFeatures(t testing.TB, e *Engine) uint32 {
	t.Helper()
	c, err := readConf(e.mem.ctl, e.mem.active.load()&1)
	if err != nil {
		t.Fatal(err)
	}
	return c.Features
}

// ruleSet returns a random valid rule set of up to maxCompound compound
// rules and maxPrefix prefix rules, shuffled together.
func (g *diffGen) ruleSet(maxCompound, maxPrefix int) *RuleSet {
	rs := &RuleSet{Policy: g.action(), Malformed: Action(1 + g.rng.IntN(2))}
	for range g.rng.IntN(maxCompound + 1) {
		rs.Rules = append(rs.Rules, g.compound())
	}
	seen := make(map[netip.Prefix]bool)
	for range g.rng.IntN(maxPrefix + 1) {
		p := g.prefix(g.rng.IntN(2) == 0)
		if seen[p] {
			continue
		}
		seen[p] = true
		rs.Rules = append(rs.Rules, Rule{Action: g.action(), Src: p, Origin: g.origin()})
	}
	// Destination prefix rules (the destination table, which only the
	// full path has), in half of the sets not made for the plain path.
	if g.dst && !g.plain && g.rng.IntN(2) == 0 {
		dseen := make(map[netip.Prefix]bool)
		for range g.rng.IntN(maxPrefix/2 + 1) {
			p := g.prefix(g.rng.IntN(2) == 0)
			if dseen[p] {
				continue
			}
			dseen[p] = true
			rs.Rules = append(rs.Rules, Rule{Action: g.action(), Dst: p, Origin: g.origin()})
		}
	}
	g.rng.Shuffle(len(rs.Rules), func(i, j int) { rs.Rules[i], rs.Rules[j] = rs.Rules[j], rs.Rules[i] })
	return rs
}

func ruleSetText(rs *RuleSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "policy %s\nmalformed %s\n", rs.EffectivePolicy(), rs.EffectiveMalformed())
	for i, r := range rs.Rules {
		fmt.Fprintf(&b, "%s # %d, origin %s\n", r.String(), i, OriginName(r.Origin))
	}
	return b.String()
}

// diffCheck runs frame through the kernel and the model and describes any
// disagreement.
func diffCheck(r *runner, m *Model, frame []byte) (string, error) {
	return diffCheckOn(r, m, frame, 0, 0)
}

// diffCheckOn is diffCheck for a frame arriving on rx queue queue of the
// interface with index ifindex.
func diffCheckOn(r *runner, m *Model, frame []byte, ifindex, queue int) (string, error) {
	want := m.EvalOn(frame, uint32(queue))
	if len(frame) < 14 {
		return "", nil // BPF_PROG_TEST_RUN refuses frames shorter than Ethernet
	}
	got, err := r.runOn(frame, ifindex, queue)
	if err != nil {
		return "", err
	}
	if want.Class == ClassCompound && m.rs.Rules[want.Rule].Action == ActionLimit &&
		got.Class == want.Class && got.Rule == want.Rule && (got.Verdict == ActionPass || got.Verdict == ActionDrop) {
		return "", nil // a limit rule decided: pass or drop by its bucket
	}
	if got.Result != want {
		return fmt.Sprintf("kernel %v, model %v (rx queue %d)", got, want, queue), nil
	}
	return "", nil
}

// TestDifferential: random rule sets and random (also mutated and cut
// short) frames through the kernel program and the Go model, which must
// agree on verdict, deciding stage and rule for every frame.
func TestDifferential(t *testing.T) {
	t.Parallel()
	n := *diffFrames
	if n == 0 {
		n = 200_000
		if testing.Short() {
			n = 20_000
		}
	}
	opts := testOptions
	opts.DstPrefixes = true
	e := newTestEngine(t, opts)
	// Test runs take an rx queue only with a device that has it.
	veth := testenv.NewVeth(t, testenv.VethOptions{Queues: diffQueues})
	g := newDiffGen(*diffSeed)
	g.dst = true
	t.Logf("seed %d (-fastdrop.seed), %d frames (-fastdrop.frames)", *diffSeed, n)
	const perSet = 1000
	failures := 0
	classes := make(map[ResultClass]int)
	verdicts := make(map[Action]int)
	// Rule sets with compound rules that the program's plain path
	// judged (fd_conf.features 0), and the others.
	var plainSets, fullSets int
	defer func() {
		t.Logf("decided by: %v; verdicts %v; sets with compound rules on the plain path %d, full %d",
			classes, verdicts, plainSets, fullSets)
	}()
	for done := 0; done < n; {
		maxCompound, maxPrefix := 12, 40
		switch g.rng.IntN(10) {
		case 0:
			maxCompound = 256
		case 1:
			maxCompound = 0
		case 2:
			maxPrefix = 400
		}
		g.plain = g.rng.IntN(3) == 0
		rs := g.ruleSet(maxCompound, maxPrefix)
		r := mustApply(t, e, rs)
		m := NewModel(rs)
		if f := activeFeatures(t, e); slices.ContainsFunc(rs.Rules, func(r Rule) bool { return !r.IsPrefixOnly() }) {
			if f == 0 {
				plainSets++
			} else {
				fullSets++
			}
			if g.plain && f != 0 {
				t.Fatalf("a rule set of plainRule's rules has features %#x: plainRule or confFor's features is out of date\nrules:\n%s", f, ruleSetText(rs))
			}
		}
		for range min(perSet, n-done) {
			done++
			frame := g.frame()
			queue := g.rng.IntN(diffQueues)
			res := m.EvalOn(frame, uint32(queue))
			classes[res.Class]++
			verdicts[res.Verdict]++
			msg, err := diffCheckOn(r, m, frame, veth.Index, queue)
			if err != nil {
				t.Fatalf("frame %x: %v", frame, err)
			}
			if msg == "" {
				continue
			}
			failures++
			t.Errorf("%s\nframe %s\nrules:\n%s", msg, hex.EncodeToString(frame), ruleSetText(rs))
			if failures >= 5 {
				t.Fatalf("stopping after %d disagreements", failures)
			}
		}
	}
	if n >= 20_000 && (plainSets < 3 || fullSets < 3) {
		t.Errorf("only %d rule sets on the plain path and %d on the full path: both must be tested", plainSets, fullSets)
	}
}

// fuzzEngine is one engine per fuzzing process (with the rule set of the
// last seed), created on first use.
var fuzzEngine struct {
	sync.Mutex
	e    *Engine
	err  error
	seed uint8
	r    *runner
	m    *Model
	rs   *RuleSet
}

// FuzzDifferential: go test -fuzz FuzzDifferential ./fastdrop/ mutates a
// frame (and picks one of 256 random rule sets) and checks the kernel
// program against the model.
func FuzzDifferential(f *testing.F) {
	testenv.RequireRoot(f)
	g := newDiffGen(1)
	for i := range 32 {
		f.Add(uint8(i), g.frame())
	}
	f.Add(uint8(0), frames.UDP4("10.0.0.1", "10.0.0.2", 1, 53, 0).Bytes)
	f.Add(uint8(1), frames.TCP6("2001:db8::1", "2001:db8::2", 1, 443, 0).Bytes)
	f.Add(uint8(2), withTTL(spec4("10.0.0.1", "10.0.0.2", frames.ProtoUDP, 1, 53), 1))
	f.Fuzz(func(t *testing.T, seed uint8, frame []byte) {
		fe := &fuzzEngine
		fe.Lock()
		defer fe.Unlock()
		if fe.e == nil && fe.err == nil {
			opts := testOptions
			opts.trace = true
			fe.e, fe.err = New(opts)
			fe.seed = 255
			fe.rs = nil
		}
		if fe.err != nil {
			t.Fatalf("New: %v", fe.err)
		}
		if fe.rs == nil || fe.seed != seed {
			rs := newDiffGen(uint64(seed)).ruleSet(16, 40)
			if err := fe.e.Apply(rs); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			fe.seed, fe.rs, fe.r, fe.m = seed, rs, newRunner(fe.e), NewModel(rs)
		}
		if len(frame) > 3000 {
			frame = frame[:3000]
		}
		msg, err := diffCheck(fe.r, fe.m, bytes.Clone(frame))
		if err != nil {
			t.Fatal(err)
		}
		if msg != "" {
			t.Errorf("%s\nframe %x\nrules:\n%s", msg, frame, ruleSetText(fe.rs))
		}
	})
}

// TestIncrementalDifferential: single-rule Add, Delete and Replace (which
// change the IPv4 table in place, entry by entry) must leave the kernel
// agreeing with a model of the resulting rule set.
func TestIncrementalDifferential(t *testing.T) {
	t.Parallel()
	opts := testOptions
	opts.DstPrefixes = true
	e := newTestEngine(t, opts)
	g := newDiffGen(*diffSeed + 1)
	g.dst = true
	rs := g.ruleSet(8, 60)
	mustApply(t, e, rs)
	ops := 300
	if testing.Short() {
		ops = 60
	}
	randomRule := func() Rule {
		if g.rng.IntN(4) == 0 {
			return g.compound()
		}
		// Mostly IPv4, long prefixes: tbl8 groups come and go.
		v6 := g.rng.IntN(5) == 0
		a := g.near(v6)
		bits := a.BitLen() - g.rng.IntN(17)
		if g.rng.IntN(8) == 0 {
			bits = g.rng.IntN(a.BitLen() + 1)
		}
		p, _ := a.Prefix(bits)
		if g.rng.IntN(3) == 0 { // the destination table, changed in place too
			return Rule{Action: Action(1 + g.rng.IntN(2)), Dst: p}
		}
		return Rule{Action: Action(1 + g.rng.IntN(2)), Src: p}
	}
	for op := range ops {
		cur, err := e.RuleSet()
		if err != nil {
			t.Fatal(err)
		}
		var desc string
		switch n := g.rng.IntN(3); {
		case n == 0 && len(cur.Rules) > 0:
			r := cur.Rules[g.rng.IntN(len(cur.Rules))]
			desc = "delete " + r.String()
			err = e.Delete(r)
		case n == 1 && len(cur.Rules) > 0:
			r := cur.Rules[g.rng.IntN(len(cur.Rules))]
			nr := randomRule()
			desc = "replace " + r.String() + " by " + nr.String()
			err = e.Replace(r, nr)
		default:
			nr := randomRule()
			desc = "add " + nr.String()
			err = e.Add(nr)
		}
		if err != nil {
			if errors.Is(err, ErrDuplicatePrefix) {
				continue
			}
			t.Fatalf("op %d, %s: %v", op, desc, err)
		}
		now, err := e.RuleSet()
		if err != nil {
			t.Fatal(err)
		}
		r, m := newRunner(e), NewModel(now)
		for range 100 {
			frame := g.frame()
			msg, err := diffCheck(r, m, frame)
			if err != nil {
				t.Fatalf("frame %x: %v", frame, err)
			}
			if msg != "" {
				t.Fatalf("after op %d (%s): %s\nframe %x\nrules:\n%s", op, desc, msg, frame, ruleSetText(now))
			}
		}
	}
}

// memStore is a tbl8 pool in Go memory, for v4Table without a kernel.
type memStore []byte

func (m memStore) ReadAt(p []byte, off int64) (int, error)  { return copy(p, m[off:]), nil }
func (m memStore) WriteAt(p []byte, off int64) (int, error) { return copy(m[off:], p), nil }

// TestV4TableOps drives the DIR-24-8 table alone through random inserts
// and removes, each its own change (flushed and committed), and compares
// every lookup with a brute-force longest match.
func TestV4TableOps(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(*diffSeed, 2))
	const pool = 64
	tab, err := newV4Table(pool, pool, 1<<12, make(memStore, pool*v4GroupBytes), make(memStore, pool*sparseSize))
	if err != nil {
		t.Fatal(err)
	}
	defer tab.close()
	type pfx struct {
		addr uint32
		bits uint8
	}
	live := map[pfx]uint32{}
	nextSlot := uint32(firstRule)
	bases := []uint32{0x0a000000, 0x0a000100, 0xc0a80000, 0xffffff00}
	lookup := func(a uint32) uint32 {
		best, bestLen := uint32(0), -1
		for p, v := range live {
			if int(p.bits) > bestLen && a&maskV4(int(p.bits)) == p.addr {
				best, bestLen = v, int(p.bits)
			}
		}
		return best
	}
	var maxSparse, maxDense int
	for op := range 3000 {
		if len(live) > 0 && rng.IntN(2) == 0 {
			for p, v := range live {
				if err := tab.remove(v4Prefix{addr: p.addr, bits: p.bits, val: v}); err != nil {
					t.Fatalf("op %d: remove: %v", op, err)
				}
				delete(live, p)
				break
			}
		} else {
			bits := uint8(16 + rng.IntN(17))
			switch rng.IntN(10) {
			case 0:
				bits = uint8(rng.IntN(33))
			case 1, 2, 3:
				bits = 32 // host routes: sparse groups, made dense past sparseMax
			}
			a := (bases[rng.IntN(len(bases))] ^ uint32(rng.IntN(1024))) & maskV4(int(bits))
			p := pfx{a, bits}
			if _, ok := live[p]; ok {
				continue
			}
			v := mkVal(ActionDrop, nextSlot)
			nextSlot++
			if err := tab.insert(v4Prefix{addr: a, bits: bits, val: v}); err != nil {
				t.Fatalf("op %d: insert: %v", op, err)
			}
			live[p] = v
		}
		if err := tab.flush(); err != nil {
			t.Fatal(err)
		}
		tab.committed()
		maxSparse = max(maxSparse, tab.liveSparse())
		maxDense = max(maxDense, tab.liveGroups())
		for range 20 {
			a := bases[rng.IntN(len(bases))] ^ uint32(rng.IntN(2048))
			if got, want := tab.lookup(a), lookup(a); got != want {
				t.Fatalf("op %d: lookup %08x = %x, want %x", op, a, got, want)
			}
		}
	}
	// Every /24 with a group has prefixes longer than /24 (groups are
	// collapsed and freed when they no longer do).
	long := map[uint32]bool{}
	for p := range live {
		if p.bits > 24 {
			long[p.addr>>8] = true
		}
	}
	if maxSparse == 0 || maxDense == 0 {
		t.Errorf("at most %d sparse and %d tbl8 groups in use: both kinds should have been", maxSparse, maxDense)
	}
	if n, s := tab.liveGroups(), tab.liveSparse(); n+s != len(long) {
		t.Errorf("%d tbl8 and %d sparse groups in use, for %d /24s with longer prefixes", n, s, len(long))
	}
}

// TestPrefixIndex checks the open-addressing index against a Go map under
// random puts and deletes (deletes move entries back within runs).
func TestPrefixIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(*diffSeed, 3))
	x := newPrefixIndex(4)
	want := map[slotKey]uint32{}
	key := func() slotKey {
		// Few distinct keys, so puts overwrite and deletes hit.
		return slotKey{hi: uint64(rng.IntN(300)), lo: uint64(rng.IntN(2)), bits: uint8(rng.IntN(3)), action: Action(1 + rng.IntN(2))}
	}
	for op := range 20000 {
		k := key()
		if rng.IntN(3) == 0 {
			x.del(k)
			delete(want, k)
		} else {
			v := uint32(1 + rng.IntN(1000))
			x.put(k, v)
			want[k] = v
		}
		if x.n != len(want) {
			t.Fatalf("op %d: %d entries, want %d", op, x.n, len(want))
		}
		k = key()
		got, ok := x.get(k)
		if w, wok := want[k]; got != w || ok != wok {
			t.Fatalf("op %d: get %+v = %d %v, want %d %v", op, k, got, ok, w, wok)
		}
	}
	for k, w := range want {
		if got, ok := x.get(k); !ok || got != w {
			t.Fatalf("get %+v = %d %v, want %d", k, got, ok, w)
		}
	}
}

// TestV6TableStructured builds the IPv6 hash table from prefix sets with
// the structure real lists have (consecutive /48s, /56s, /64s, host
// addresses) at three quarters of the table's size, the most the program
// is sized for, and checks every prefix is found: the hash must spread
// them so that none sits more than FD_V6_PROBES slots from home (build
// reseeds, and fails, otherwise).
func TestV6TableStructured(t *testing.T) {
	t.Parallel()
	const n = 48 << 10 // 3/4 of 64k entries
	for _, kind := range []struct {
		name string
		bits int
		at   int // byte where the counter goes
	}{{"consecutive /48", 48, 2}, {"consecutive /56", 56, 4}, {"consecutive /64", 64, 4}, {"consecutive hosts", 128, 12}} {
		var ps []v6Prefix
		var pfx []netip.Prefix
		for i := range n {
			var a [16]byte
			a[0], a[1], a[2], a[3] = 0x20, 0x01, 0x0d, 0xb8
			c := uint32(i) << (32 - 8*min(4, (kind.bits/8)-kind.at))
			a[kind.at], a[kind.at+1], a[kind.at+2], a[kind.at+3] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
			p, _ := netip.AddrFrom16(a).Prefix(kind.bits)
			ps = append(ps, v6PrefixOf(p, mkVal(ActionDrop, firstRule+uint32(i))))
			pfx = append(pfx, p)
		}
		tab, err := newV6Table(64 << 10)
		if err != nil {
			t.Fatal(err)
		}
		if err := tab.build(ps); err != nil {
			t.Fatalf("%s: %v", kind.name, err)
		}
		for i := 0; i < n; i += 97 {
			p := ps[i]
			if got := tab.lookup(pfx[i].Addr()); got != p.val {
				t.Fatalf("%s: prefix %d: lookup %x, want %x", kind.name, i, got, p.val)
			}
		}
		tab.close()
	}
}

// fieldIndex returns the index in matchFields of the field called name.
func fieldIndex(name string) int {
	for i := range matchFields {
		if matchFields[i].name == name {
			return i
		}
	}
	panic("no field " + name)
}

package fastdrop

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/pktgen"
)

// Two rule sets that judge two flows in opposite ways, built so that a
// frame judged by parts of both lands on a rule that no consistent
// evaluation ever reaches ("never" below):
//
//	flow X: 198.18.0.0 sport 1024, flow Y: 198.18.0.1 sport 1025
//	set A: X dropped by compound rule 0, Y passed by a prefix rule
//	set B: Y dropped by compound rule 1, X passed by a prefix rule
//
// A compound decision from one set's tables and the other's rule list
// lands on a filler (compound rules at the other position match nothing);
// a compound miss from one set and a prefix lookup in the other lands on a
// canary (a prefix rule the set's own compound rule shadows); a default
// verdict, or anything in a slot no rule owns, is also a mix. Both sets
// end with the same rules for what the peer's own stack sends (IPv6
// neighbour discovery and MLD, ARP, IGMP), which keep their counters across
// the flips since their text does not change.
const (
	atomicSetA = `
drop udp src 198.18.0.0 sport 1024          # X (A)
drop udp dport 7 src 198.18.0.250           # never: filler
pass src 198.18.0.1/32                      # Y (A)
drop src 198.18.0.0/32                      # never: canary, shadowed by rule 0
` + atomicBackground
	atomicSetB = `
policy drop
drop udp dport 7 src 198.18.0.251           # never: filler
drop udp src 198.18.0.1 sport 1025          # Y (B)
pass src 198.18.0.0/32                      # X (B)
drop src 198.18.0.1/32                      # never: canary, shadowed by rule 1
` + atomicBackground
	atomicBackground = `
pass ether ipv6
pass ether arp
pass proto 2
`
)

// legit[set][rule index] says whether a rule may count frames.
var atomicLegit = [2][4]bool{{true, false, true, false}, {false, true, true, false}}

// TestAtomicReplaceUnderTraffic flips between the two sets while a
// generator sends both flows at full speed into a veth end where the
// program runs in native mode, and checks that every frame was judged by
// one whole set.
func TestAtomicReplaceUnderTraffic(t *testing.T) {
	t.Parallel()
	veth := testenv.NewVeth(t, testenv.VethOptions{})
	e := newTestEngine(t, testOptions)
	sets := [2]*RuleSet{kParse(t, atomicSetA), kParse(t, atomicSetB)}
	mustApply(t, e, sets[0])
	l, err := link.AttachXDP(link.XDPOptions{Program: e.Program(), Interface: veth.Index, Flags: link.XDPDriverMode})
	if err != nil {
		testenv.SkipOrFail(t, "attach XDP in driver mode to veth: %v", err)
	}
	defer l.Close()

	g, err := pktgen.New(pktgen.Options{Flows: 2, L4Checksum: 6})
	if err != nil {
		t.Fatalf("pktgen: %v", err)
	}
	defer g.Close()
	frame := frames.UDP4("198.18.0.2", "198.18.0.1", 1024, 9, 18).Bytes

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var sent pktgen.Stats
	var genErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		genErr = veth.InPeerNS(func() error {
			var err error
			sent, err = g.Run(ctx, veth.PeerIndex, frame, pktgen.RunOptions{Duration: 30 * time.Second})
			if errors.Is(err, context.Canceled) {
				err = nil
			}
			return err
		})
	}()

	flips := 300
	if testing.Short() {
		flips = 60
	}
	var legit, never [2][4]uint64
	var background uint64
	// A removed rule's slot, and which rule of which set it was.
	type who struct{ set, rule int }
	owner := map[uint32]who{}
	e.retireHook = func(slot uint32, c Counter) {
		w, ok := owner[slot]
		if !ok {
			t.Errorf("slot %d retired, which no rule of the two sets had", slot)
			return
		}
		delete(owner, slot)
		switch {
		case w.rule >= len(atomicLegit[w.set]):
			background += c.Packets
		case atomicLegit[w.set][w.rule]:
			legit[w.set][w.rule] += c.Packets
		default:
			never[w.set][w.rule] += c.Packets
		}
	}
	cur := 0
	for range flips {
		for i, s := range e.slots {
			owner[s] = who{cur, i}
		}
		mustApply(t, e, sets[cur^1])
		cur ^= 1
	}
	for i, s := range e.slots {
		owner[s] = who{cur, i}
	}
	mustApply(t, e, &RuleSet{}) // the last set out of force too
	cancel()
	wg.Wait()
	if genErr != nil {
		t.Fatalf("generator: %v", genErr)
	}

	c := counters(t, e)
	total := c.Drop.Packets + c.Pass.Packets
	var sumLegit uint64
	for s := range legit {
		for i := range legit[s] {
			sumLegit += legit[s][i]
			if never[s][i] != 0 {
				t.Errorf("set %c rule %d (%s) judged %d frames: some frames saw parts of both sets", 'A'+s, i, sets[s].Rules[i], never[s][i])
			}
		}
	}
	if c.Malformed.Packets != 0 {
		t.Errorf("%d malformed frames", c.Malformed.Packets)
	}
	// The empty set at the end passes by default; before it, nothing may.
	sums, err := e.sumSlots()
	if err != nil {
		t.Fatal(err)
	}
	tail := sums[slotDefault+uint32(ActionPass)].Packets
	if d := c.Default.Packets - tail; d != 0 {
		t.Errorf("%d frames got a set's default verdict: some frames saw parts of both sets", d)
	}
	if stray := sums[slotMalform].Packets; stray != 0 {
		t.Errorf("%d frames were counted in slot 0, which no rule owns", stray)
	}
	if total-tail != sumLegit+background {
		t.Errorf("%d frames judged while the sets were in force, but the rules that may count them counted %d (and %d from the peer's stack)", total-tail, sumLegit, background)
	}
	t.Logf("%d flips; generator sent %d frames (%.1f Mpps); judged: X by A %d, Y by A %d, Y by B %d, X by B %d; %d from the peer's stack",
		flips, sent.Sent, sent.PPS()/1e6, legit[0][0], legit[0][2], legit[1][1], legit[1][2], background)
	for s := range legit {
		for i, ok := range atomicLegit[s] {
			if ok && legit[s][i] == 0 {
				t.Errorf("set %c rule %d judged no frame: the traffic did not overlap the flips", 'A'+s, i)
			}
		}
	}
}

package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdpdrop/xdpdrop/dropctl"
	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

func mustRules(t *testing.T, text string) *fastdrop.RuleSet {
	t.Helper()
	rs, err := fastdrop.Parse(strings.NewReader(text), "test")
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// pinnedRules are the rules in force on iface, read from its pins.
func pinnedRules(t *testing.T, iface, pins string) string {
	t.Helper()
	att, eng, err := dropctl.Open(iface, pins)
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	defer eng.Close()
	rs, err := eng.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, r := range rs.Rules {
		s = append(s, fastdrop.OriginName(r.Origin)+": "+r.String())
	}
	return strings.Join(s, "; ")
}

// TestKernelPlaneKeepsEngineOpen: the kernel plane keeps the engine open
// between swaps, and opens it again when another command replaced the
// program and its maps (here: reloaded with bigger tables, as xdpdrop
// drop does when the rules outgrow them), so that the next swap goes into
// the maps in force, not the old ones.
func TestKernelPlaneKeepsEngineOpen(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	pins := testenv.TempPinDir(t)
	cfg := &Config{LockTimeout: 5 * time.Second}
	k := &kernelPlane{pinRoot: pins, cfg: cfg}
	defer k.close()
	ic := InterfaceConfig{Name: v.Name, Mode: "auto"}
	if _, err := k.apply(ic, OriginFiles, mustRules(t, "drop udp dport 1001\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := k.apply(ic, OriginFiles, mustRules(t, "drop udp dport 1002\n")); err != nil {
		t.Fatal(err)
	}
	first := k.engines[v.Name]
	if first == nil {
		t.Fatal("no engine kept open after a swap")
	}
	if _, err := k.apply(ic, OriginFiles, mustRules(t, "drop udp dport 1003\n")); err != nil {
		t.Fatal(err)
	}
	if k.engines[v.Name] != first {
		t.Fatal("the engine was opened again though the program is the same")
	}
	if got := pinnedRules(t, v.Name, pins); got != "agent:file: drop udp dport 1003" {
		t.Fatalf("rules in force %q", got)
	}

	// Another command loads the program again with new maps.
	att, err := dropctl.OpenAttachment(v.Name, pins)
	if err != nil {
		t.Fatal(err)
	}
	err = dropctl.Reload(att, mustRules(t, "drop udp dport 2000\n"))
	att.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.apply(ic, OriginFiles, mustRules(t, "drop udp dport 1004\n")); err != nil {
		t.Fatal(err)
	}
	if got := pinnedRules(t, v.Name, pins); got != "drop: drop udp dport 2000; agent:file: drop udp dport 1004" {
		t.Fatalf("after the program was replaced: rules in force %q, want the other command's rule and the agent's new set", got)
	}
}

// TestKernelPlaneLeavesOtherOrigins: the agent's swaps, of either of its
// origins, leave the rules of xdpdrop drop ("drop") and xdpdrop redirect
// ("redirect") in force, also when its rules outgrow the tables and the
// program is loaded again with bigger ones; a file prefix rule that the
// drop command holds already is refused, and the drop command's stays.
func TestKernelPlaneLeavesOtherOrigins(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	pins := testenv.TempPinDir(t)
	att, err := dropctl.Attach(mustRules(t, "drop udp dport 53\ndrop src 198.51.100.0/24\n"), loader.Options{Interface: v.Name, Pin: true, PinRoot: pins})
	if err != nil {
		t.Fatal(err)
	}
	att.Close()
	att, eng, err := dropctl.Open(v.Name, pins)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.ApplyOrigin(fastdrop.OriginRedirect, mustRules(t, "redirect udp dport 5353 queue 0\n")); err != nil {
		t.Fatal(err)
	}
	eng.Close()
	att.Close()

	cfg := &Config{LockTimeout: 5 * time.Second}
	k := &kernelPlane{pinRoot: pins, cfg: cfg}
	defer k.close()
	ic := InterfaceConfig{Name: v.Name, Mode: "auto"}
	others := "drop: drop udp dport 53; drop: drop src 198.51.100.0/24; redirect: redirect udp dport 5353 queue 0"
	if _, err := k.apply(ic, OriginFiles, mustRules(t, "drop udp dport 1001\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := k.apply(ic, OriginFlowSpec, mustRules(t, "drop ether ipv4 udp dport 2001\n")); err != nil {
		t.Fatal(err)
	}
	want := sortedRules(others + "; agent:file: drop udp dport 1001; agent:flowspec: drop ether ipv4 udp dport 2001")
	if got := sortedRules(pinnedRules(t, v.Name, pins)); got != want {
		t.Fatalf("rules in force\n%s\nwant\n%s", got, want)
	}

	// A prefix the drop command holds: refused, nothing changed.
	_, err = k.apply(ic, OriginFiles, mustRules(t, "drop udp dport 1002\ndrop src 198.51.100.0/24\n"))
	var ce *collisionError
	if !errors.As(err, &ce) || len(ce.refused) != 1 || !strings.Contains(ce.refused[1], "prefix 198.51.100.0/24 on "+v.Name+" is a rule of origin drop already") {
		t.Fatalf("apply of a prefix another origin holds: %v, want a collision of rule 1", err)
	}
	if got := sortedRules(pinnedRules(t, v.Name, pins)); got != want {
		t.Fatalf("after a refused swap: rules in force\n%s\nwant\n%s", got, want)
	}

	// A burst: one withdrawn, two announced; then a new order of the
	// rules kept. Each is one swap (ApplyOrigin adds and deletes what
	// changed), and the order in force is the one given.
	for _, set := range []string{"drop ether ipv4 udp dport 2001\ndrop ether ipv4 udp dport 2002\ndrop ether ipv4 udp dport 2003\n", "drop ether ipv4 udp dport 2002\ndrop ether ipv4 udp dport 2003\ndrop ether ipv4 udp dport 2004\n", "drop ether ipv4 udp dport 2004\ndrop ether ipv4 udp dport 2002\n"} {
		if _, err := k.apply(ic, OriginFlowSpec, mustRules(t, set)); err != nil {
			t.Fatal(err)
		}
		att, eng, err := dropctl.Open(v.Name, pins)
		if err != nil {
			t.Fatal(err)
		}
		fs, err := eng.OriginRules(OriginFlowSpec)
		eng.Close()
		att.Close()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range fs {
			got = append(got, r.String())
		}
		if g := strings.Join(got, "\n") + "\n"; g != set {
			t.Fatalf("FlowSpec rules in force, in order:\n%swant\n%s", g, set)
		}
	}
	mustApply := func(set string) {
		if _, err := k.apply(ic, OriginFlowSpec, mustRules(t, set)); err != nil {
			t.Fatal(err)
		}
	}
	mustApply("drop ether ipv4 udp dport 2001\n")

	// Outgrow the tables: /28s in 600 different /24s.
	var sb strings.Builder
	for i := range 600 {
		fmt.Fprintf(&sb, "drop src 10.%d.%d.16/28\n", i/256, i%256)
	}
	res, err := k.apply(ic, OriginFiles, mustRules(t, sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Reloaded {
		t.Fatal("600 tbl8 groups fit the tables of a program loaded for 3 rules: the test does not outgrow them")
	}
	got := pinnedRules(t, v.Name, pins)
	for _, r := range strings.Split(others+"; agent:flowspec: drop ether ipv4 udp dport 2001", "; ") {
		if !strings.Contains(got, r) {
			t.Fatalf("after the reload: %q is gone: %s", r, got[:min(len(got), 400)])
		}
	}
	if n := strings.Count(got, "agent:file: "); n != 600 {
		t.Fatalf("after the reload: %d file rules, want 600", n)
	}
}

// sortedRules sorts the rules of a pinnedRules list: the engine lists
// them in evaluation order (by origin), not in the order applied.
func sortedRules(s string) string {
	l := strings.Split(s, "; ")
	slices.Sort(l)
	return strings.Join(l, "; ")
}

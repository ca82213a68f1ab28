package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/xdpdrop/xdpdrop/dropctl"
	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
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

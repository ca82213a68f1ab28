package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// inheritPlane is a fakePlane on which a previous agent left FlowSpec
// rules in force.
type inheritPlane struct {
	fakePlane
	prev []fastdrop.Rule
}

func (p *inheritPlane) originRules(ic InterfaceConfig, origin string) ([]fastdrop.Rule, error) {
	if origin != OriginFlowSpec {
		return nil, nil
	}
	return p.prev, nil
}

// flowSpecSet is what the agent last applied as iface's FlowSpec rules,
// and whether it applied any.
func (p *inheritPlane) flowSpecSet(iface string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.sets[iface+" "+OriginFlowSpec]
	return strings.Join(s, "; "), ok
}

func inheritConfig(t *testing.T, port int, stale string) *Config {
	t.Helper()
	cfg, err := ParseConfig([]byte(fmt.Sprintf(`
interfaces:
  - name: test0
    rules: |
      pass src 192.0.2.0/24 udp
debounce: 10ms
bgp:
  local_as: 65001
  router_id: 127.0.0.1
  listen_addresses: [127.0.0.1]
  listen_port: %d
  stale_time: %s
  neighbors:
    - address: 127.0.0.2
      as: 65000
      passive: true
`, port, stale)), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func runAgent(t *testing.T, cfg *Config, plane dataplane) *Agent {
	t.Helper()
	ag, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), plane: plane})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ag
}

// TestAgentKeepsPreviousFlowSpecRules: an agent that starts where a
// previous one left FlowSpec rules in force keeps them, exactly as they
// are, for the stale time (no swap clears them before its sessions are
// up; status counts them and the interface is ready), then replaces them
// with its routes' rules; and at once when its routes cover every one of
// them. Without a stale time they are cleared at once.
func TestAgentKeepsPreviousFlowSpecRules(t *testing.T) {
	prev := mustRules(t, "drop ether ipv4 tcp dst 10.0.0.0/8\ndrop ether ipv4 dst 10.0.0.0/8\n").Rules
	for i := range prev {
		prev[i].Origin = OriginFlowSpec
	}
	t.Run("stale time ends", func(t *testing.T) {
		plane := &inheritPlane{prev: prev}
		start := time.Now()
		ag := runAgent(t, inheritConfig(t, freePort(t), "1500ms"), plane)
		eventually(t, "file rules in force", 5*time.Second, func() bool { return plane.rules("test0") == "pass udp src 192.0.2.0/24" })
		for time.Since(start) < time.Second {
			if s, ok := plane.flowSpecSet("test0"); ok {
				t.Fatalf("after %s, before the stale time: FlowSpec rules replaced by %q", time.Since(start), s)
			}
			s := ag.Status()
			if is := s.Interfaces[0]; is.InheritedRules != 2 || is.BGPRules != 2 || !s.Ready {
				t.Fatalf("status while the previous rules are kept: inherited %d, bgp rules %d, ready %v; want 2, 2, true", is.InheritedRules, is.BGPRules, s.Ready)
			}
			time.Sleep(50 * time.Millisecond)
		}
		eventually(t, "previous rules removed after the stale time", 5*time.Second, func() bool { s, ok := plane.flowSpecSet("test0"); return ok && s == "" })
		if el := time.Since(start); el < 1500*time.Millisecond {
			t.Errorf("previous rules removed after %s, want the stale time (1.5s)", el)
		}
		if is := ag.Status().Interfaces[0]; is.InheritedRules != 0 || is.BGPRules != 0 {
			t.Errorf("status after the stale time: inherited %d, bgp rules %d; want 0, 0", is.InheritedRules, is.BGPRules)
		}
	})
	t.Run("routes announced again", func(t *testing.T) {
		plane := &inheritPlane{prev: prev}
		port := freePort(t)
		start := time.Now()
		ag := runAgent(t, inheritConfig(t, port, "60s"), plane)
		eventually(t, "speaker started", 5*time.Second, ag.bgp.isStarted)
		an := newAnnouncer(t, port)
		net10 := flowPath(t, false, 4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, bgp.NewTrafficRateExtended(0, 0))
		net10tcp := flowPath(t, false, 4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8"), comp(fsProto, item("=", 6))}, bgp.NewTrafficRateExtended(0, 0))
		net11 := flowPath(t, false, 4, []bgp.FlowSpecComponentInterface{dst4("11.0.0.0/8")}, bgp.NewTrafficRateExtended(0, 0))
		an.announce(t, net11)
		// One of the two is not announced again yet: the previous rules
		// stay as they are, the new route's rule is not put among them.
		eventually(t, "route received", 15*time.Second, func() bool { return ag.Status().BGP.Received == 1 })
		time.Sleep(200 * time.Millisecond)
		if s, ok := plane.flowSpecSet("test0"); ok {
			t.Fatalf("FlowSpec rules replaced by %q before the routes held cover the previous ones", s)
		}
		an.announce(t, net10)
		an.announce(t, net10tcp)
		// (The previous agent's compound form of the 10.0.0.0/8 route
		// counts as covered by its destination prefix rule.)
		want := "drop ether ipv4 tcp dst 10.0.0.0/8; drop dst 10.0.0.0/8; drop dst 11.0.0.0/8"
		eventually(t, "the routes' rules in force", 15*time.Second, func() bool { s, _ := plane.flowSpecSet("test0"); return s == want })
		if el := time.Since(start); el > 30*time.Second {
			t.Errorf("replaced after %s: not before the stale time (60s)", el)
		}
	})
	t.Run("no stale time", func(t *testing.T) {
		plane := &inheritPlane{prev: prev}
		runAgent(t, inheritConfig(t, freePort(t), "0s"), plane)
		eventually(t, "previous rules cleared at once", 5*time.Second, func() bool { s, ok := plane.flowSpecSet("test0"); return ok && s == "" })
	})
}

// TestKernelPlaneOriginRules: what a restarted agent reads back from the
// kernel is the FlowSpec rules in force, in order, and none where nothing
// is attached.
func TestKernelPlaneOriginRules(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	pins := testenv.TempPinDir(t)
	cfg := &Config{LockTimeout: 5 * time.Second}
	ic := InterfaceConfig{Name: v.Name, Mode: "auto"}
	k := &kernelPlane{pinRoot: pins, cfg: cfg}
	if got, err := k.originRules(ic, OriginFlowSpec); err != nil || len(got) != 0 {
		t.Fatalf("nothing attached: %v, %v", got, err)
	}
	if _, err := k.apply(ic, OriginFiles, mustRules(t, "drop udp dport 1001\n")); err != nil {
		t.Fatal(err)
	}
	set := "drop ether ipv4 udp dport 2002\ndrop ether ipv4 tcp dst 10.0.0.0/8\ndrop ether ipv4 dst 10.0.0.0/8\n"
	if _, err := k.apply(ic, OriginFlowSpec, mustRules(t, set)); err != nil {
		t.Fatal(err)
	}
	k.close()
	k2 := &kernelPlane{pinRoot: pins, cfg: cfg} // the next agent
	defer k2.close()
	got, err := k2.originRules(ic, OriginFlowSpec)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, r := range got {
		texts = append(texts, r.String())
	}
	if g := strings.Join(texts, "\n") + "\n"; g != set {
		t.Fatalf("FlowSpec rules read back:\n%swant\n%s", g, set)
	}
}

// TestAgentRestartKeepsFlowSpecRules: against the kernel, an agent that
// is stopped leaves its FlowSpec rules in force, and the next one, whose
// neighbour is gone, keeps them for the stale time, then removes them.
func TestAgentRestartKeepsFlowSpecRules(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	pins := testenv.TempPinDir(t)
	port := freePort(t)
	cfg, err := ParseConfig([]byte(fmt.Sprintf(`
pin_root: %s
interfaces:
  - name: %s
    rules: |
      drop udp dport 7001
debounce: 10ms
bgp:
  local_as: 65001
  router_id: 127.0.0.1
  listen_addresses: [127.0.0.1]
  listen_port: %d
  stale_time: 2s
  neighbors:
    - address: 127.0.0.2
      as: 65000
      passive: true
`, pins, v.Name, port)), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	flowspec := "agent:flowspec: drop dst 10.0.0.0/8"
	func() {
		ag, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ag.Run(ctx) }()
		defer func() { cancel(); <-done }()
		eventually(t, "speaker started", 10*time.Second, ag.bgp.isStarted)
		an := newAnnouncer(t, port)
		an.announce(t, flowPath(t, false, 4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, bgp.NewTrafficRateExtended(0, 0)))
		eventually(t, "FlowSpec rule in force", 20*time.Second, func() bool { return strings.Contains(pinnedRules(t, v.Name, pins), flowspec) })
		an.stop()
	}()
	if got := pinnedRules(t, v.Name, pins); !strings.Contains(got, flowspec) {
		t.Fatalf("the stopped agent's rules: %s", got)
	}
	start := time.Now()
	ag := runAgent(t, cfg, nil)
	eventually(t, "second agent ready", 10*time.Second, func() bool { return ag.Status().Ready })
	for time.Since(start) < 1500*time.Millisecond {
		if got := pinnedRules(t, v.Name, pins); !strings.Contains(got, flowspec) {
			t.Fatalf("%s after the restart, before the stale time (2s): the previous agent's FlowSpec rule is gone: %s", time.Since(start), got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	eventually(t, "previous FlowSpec rule removed after the stale time", 10*time.Second, func() bool {
		return !strings.Contains(pinnedRules(t, v.Name, pins), "agent:flowspec")
	})
	if el := time.Since(start); el < 2*time.Second {
		t.Errorf("removed after %s, want the stale time (2s)", el)
	}
	if got := pinnedRules(t, v.Name, pins); got != "agent:file: drop udp dport 7001" {
		t.Errorf("rules in force at the end: %s", got)
	}
}

package agent

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"

	"github.com/xdpdrop/xdpdrop/dropctl"
	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// TestAgentDstRoutes: a second gobgp announces 2,000 destination-only
// discard routes over loopback (the burst, beyond the 256 compound
// rules) and a compound route that is after some of them in RFC 8955
// order, overlaps them and passes. The agent puts in force every route:
// the destination-only ones as destination prefix rules, but those the
// compound route overlaps, which stay compound rules before it (as RFC
// 8955 orders them); the program on a veth then gives each frame the
// verdict RFC 8955's order gives it. Withdrawn, they are gone.
func TestAgentDstRoutes(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	pins := testenv.TempPinDir(t)
	port := freePort(t)
	cfg, err := ParseConfig([]byte(fmt.Sprintf(`
pin_root: %s
debounce: 20ms
interfaces:
  - name: %s
    policy: pass
    rules: |
      drop src 192.0.2.0/24
bgp:
  local_as: 65001
  router_id: 127.0.0.1
  listen_addresses: [127.0.0.1]
  listen_port: %d
  neighbors:
    - address: 127.0.0.2
      as: 65000
      passive: true
`, pins, v.Name, port)), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ag := runAgent(t, cfg, &kernelPlane{pinRoot: pins, cfg: cfg})
	eventually(t, "speaker started", 10*time.Second, ag.bgp.isStarted)
	an := newAnnouncer(t, port)
	eventually(t, "session up", 20*time.Second, func() bool {
		s := ag.Status()
		return s.BGP != nil && len(s.BGP.Neighbors) == 1 && s.BGP.Neighbors[0].Up
	})
	const n = 2000 // 198.18.0.0 - 198.18.7.207
	victim := func(i int) string { return fmt.Sprintf("198.18.%d.%d", i/256, i%256) }
	discard := bgp.NewTrafficRateExtended(0, 0)
	for i := range n {
		an.announce(t, flowPath(t, false, 4, []bgp.FlowSpecComponentInterface{dst4(victim(i) + "/32")}, discard))
	}
	// After the victims in 198.18.7.0/24 (RFC 8955: the longer prefix
	// first), overlapping them, another effect: pass TCP (no action).
	tcp := flowPath(t, false, 4, []bgp.FlowSpecComponentInterface{dst4("198.18.7.0/24"), comp(fsProto, item("=", 6))})
	an.announce(t, tcp)
	eventually(t, "every route in force", 60*time.Second, func() bool {
		s := ag.Status()
		return s.BGP.Received == n+1 && s.BGP.Accepted == n+1 && len(s.Interfaces) == 1 && s.Interfaces[0].BGPRules == n+1
	})
	st := ag.Status()
	prefix, compound := 0, 0
	for _, r := range st.BGP.Routes {
		if len(r.Rules) != 1 {
			t.Fatalf("route %s: rules %v", r.NLRI, r.Rules)
		}
		if strings.HasPrefix(r.Rules[0], "drop dst ") {
			prefix++
		} else {
			compound++
		}
	}
	// 208 victims in 198.18.7.0/24 stay compound, with the TCP route.
	if prefix != n-208 || compound != 209 {
		t.Fatalf("%d destination prefix rules, %d compound rules; want %d and 209", prefix, compound, n-208)
	}

	att, err := dropctl.OpenAttachment(v.Name, pins)
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	eng, err := dropctl.OpenEngine(att)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	prog := att.Program()
	verdict := func(f frames.Frame) string {
		ret, err := prog.Run(&ebpf.RunOptions{Data: f.Bytes})
		if err != nil {
			t.Fatal(err)
		}
		return map[uint32]string{1: "drop", 2: "pass"}[ret]
	}
	for _, tc := range []struct {
		frame frames.Frame
		want  string
	}{
		{frames.UDP4("198.51.100.1", victim(0), 1, 53, 8), "drop"},
		{frames.TCP4("198.51.100.1", victim(1000), 1, 80, 0), "drop"},
		{frames.UDP4("198.51.100.1", victim(n-1), 1, 53, 8), "drop"},
		{frames.TCP4("198.51.100.1", victim(n-1), 1, 80, 0), "drop"}, // its own route comes before the TCP one
		{frames.TCP4("198.51.100.1", "198.18.7.250", 1, 80, 0), "pass"},
		{frames.UDP4("198.51.100.1", "198.18.7.250", 1, 53, 8), "pass"},
		{frames.UDP4("198.51.100.1", "198.18.9.1", 1, 53, 8), "pass"},
		{frames.UDP4("192.0.2.1", "198.18.9.1", 1, 53, 8), "drop"}, // the file's source prefix
		{frames.UDP4("192.0.2.1", victim(5), 1, 53, 8), "drop"},
	} {
		if got := verdict(tc.frame); got != tc.want {
			t.Errorf("frame to %s: %s, want %s", netip.AddrFrom4([4]byte(tc.frame.Bytes[30:34])), got, tc.want)
		}
	}
	c, err := eng.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range c.Rules {
		if rc.Rule.String() == "drop dst "+victim(1000)+"/32" && rc.Packets != 1 {
			t.Errorf("%s counted %d frames, want 1", rc.Rule, rc.Packets)
		}
	}

	for i := range n {
		an.withdraw(t, flowPath(t, true, 4, []bgp.FlowSpecComponentInterface{dst4(victim(i) + "/32")}, discard))
	}
	an.withdraw(t, flowPath(t, true, 4, []bgp.FlowSpecComponentInterface{dst4("198.18.7.0/24"), comp(fsProto, item("=", 6))}))
	eventually(t, "every route withdrawn", 60*time.Second, func() bool {
		s := ag.Status()
		return s.BGP.Received == 0 && s.Interfaces[0].BGPRules == 0
	})
	if got := verdict(frames.UDP4("198.51.100.1", victim(0), 1, 53, 8)); got != "pass" {
		t.Errorf("after the withdrawal: %s, want pass", got)
	}
}

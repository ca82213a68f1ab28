package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/osrg/gobgp/v3/pkg/server"

	"github.com/xdpdrop/xdpdrop/fastdrop"
)

// fakePlane records the rule sets the agent applies.
type fakePlane struct {
	mu      sync.Mutex
	sets    map[string][]string // by interface and origin
	swaps   int
	collide map[string]string // rule text -> reason: another origin holds its prefix
}

func (f *fakePlane) apply(ic InterfaceConfig, origin string, rs *fastdrop.RuleSet) (applied, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	refused := map[int]string{}
	for i, r := range rs.Rules {
		if why, ok := f.collide[r.String()]; ok {
			refused[i] = why
		}
	}
	if len(refused) > 0 {
		return applied{}, &collisionError{refused: refused}
	}
	var s []string
	for _, r := range rs.Rules {
		s = append(s, r.String())
	}
	if f.sets == nil {
		f.sets = map[string][]string{}
	}
	f.sets[ic.Name+" "+origin] = s
	f.swaps++
	return applied{Mode: "generic"}, nil
}

// rules are the rules on iface in evaluation order: the files', then
// the FlowSpec routes'.
func (f *fakePlane) rules(iface string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(append(slices.Clone(f.sets[iface+" "+OriginFiles]), f.sets[iface+" "+OriginFlowSpec]...), "; ")
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func eventually(t testing.TB, what string, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// announcer is a second gobgp server on loopback that announces FlowSpec
// routes to the agent's speaker.
type announcer struct {
	s *server.BgpServer
}

func newAnnouncer(t testing.TB, agentPort int) *announcer {
	t.Helper()
	s := server.NewBgpServer(server.LoggerOption(&gobgpLogger{log: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	go s.Serve()
	ctx := context.Background()
	if err := s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: 65000, RouterId: "127.0.0.2", ListenPort: -1}}); err != nil {
		t.Fatal(err)
	}
	p := &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: 65001},
		Transport: &api.Transport{RemotePort: uint32(agentPort), LocalAddress: "127.0.0.2"},
		Timers:    &api.Timers{Config: &api.TimersConfig{ConnectRetry: 1}},
		AfiSafis: []*api.AfiSafi{
			{Config: &api.AfiSafiConfig{Family: flowSpecFamily(FamilyIPv4FlowSpec), Enabled: true}},
			{Config: &api.AfiSafiConfig{Family: flowSpecFamily(FamilyIPv6FlowSpec), Enabled: true}},
		},
	}
	if err := s.AddPeer(ctx, &api.AddPeerRequest{Peer: p}); err != nil {
		t.Fatal(err)
	}
	a := &announcer{s: s}
	t.Cleanup(a.stop)
	return a
}

func (a *announcer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.s.StopBgp(ctx, &api.StopBgpRequest{})
	a.s.Stop()
}

func flowPath(t testing.TB, withdraw bool, family int, comps []bgp.FlowSpecComponentInterface, ecs ...bgp.ExtendedCommunityInterface) *api.Path {
	t.Helper()
	var nlri bgp.AddrPrefixInterface
	if family == 6 {
		nlri = bgp.NewFlowSpecIPv6Unicast(comps)
	} else {
		nlri = bgp.NewFlowSpecIPv4Unicast(comps)
	}
	nh := "0.0.0.0"
	if family == 6 {
		nh = "::"
	}
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(0), bgp.NewPathAttributeMpReachNLRI(nh, []bgp.AddrPrefixInterface{nlri})}
	if len(ecs) > 0 {
		attrs = append(attrs, bgp.NewPathAttributeExtendedCommunities(ecs))
	}
	p, err := apiutil.NewPath(nlri, withdraw, attrs, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (a *announcer) announce(t testing.TB, p *api.Path) {
	t.Helper()
	if _, err := a.s.AddPath(context.Background(), &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: p}); err != nil {
		t.Fatal(err)
	}
}

func (a *announcer) withdraw(t testing.TB, p *api.Path) {
	t.Helper()
	if err := a.s.DeletePath(context.Background(), &api.DeletePathRequest{TableType: api.TableType_GLOBAL, Family: p.Family, Path: p}); err != nil {
		t.Fatal(err)
	}
}

// TestAgentBGPInProcess: a second gobgp announces FlowSpec routes over
// loopback; the agent installs the expressible ones in RFC 8955 order
// after the file rules, refuses the others and lists them, removes a
// withdrawn one at once, and keeps the rules of a lost session for the
// stale time only.
func TestAgentBGPInProcess(t *testing.T) {
	port := freePort(t)
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
  stale_time: 1500ms
  neighbors:
    - address: 127.0.0.2
      as: 65000
      passive: true
`, port)), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plane := &fakePlane{}
	ag, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), plane: plane})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	eventually(t, "file rules in force", 5*time.Second, func() bool { return plane.rules("test0") == "pass udp src 192.0.2.0/24" })

	// gobgp sets package variables when a server starts: the second one
	// starts after the first, in the race detector's eyes too.
	eventually(t, "speaker started", 5*time.Second, ag.bgp.isStarted)
	an := newAnnouncer(t, port)
	eventually(t, "session up", 15*time.Second, func() bool {
		s := ag.Status()
		return s.BGP != nil && len(s.BGP.Neighbors) == 1 && s.BGP.Neighbors[0].Up
	})
	memcached := flowPath(t, false, 4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 17)), comp(fsDstPort, item("=", 11211))}, bgp.NewTrafficRateExtended(0, 0))
	net10 := flowPath(t, false, 4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, bgp.NewTrafficRateExtended(0, 0))
	net10proto := flowPath(t, false, 4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8"), comp(fsProto, item("=", 6))}, bgp.NewTrafficRateExtended(0, 0))
	vrf := flowPath(t, false, 4, []bgp.FlowSpecComponentInterface{dst4("10.9.0.0/16")}, bgp.NewRedirectTwoOctetAsSpecificExtended(65000, 7))
	v6 := flowPath(t, false, 6, []bgp.FlowSpecComponentInterface{dst6("2001:db8::/32", 0), comp(fsProto, item("=", 17))}, bgp.NewTrafficRateExtended(0, 0))
	for _, p := range []*api.Path{memcached, net10, net10proto, vrf, v6} {
		an.announce(t, p)
	}
	// The destination-only route as a destination prefix rule: the rules
	// after it have its effect (drop) or another family.
	want := "pass udp src 192.0.2.0/24; drop ether ipv4 tcp dst 10.0.0.0/8; drop dst 10.0.0.0/8; drop ether ipv4 udp dport 11211; drop ether ipv6 udp dst 2001:db8::/32"
	eventually(t, "FlowSpec rules in force in RFC 8955 order", 10*time.Second, func() bool { return plane.rules("test0") == want })
	// The refused route may come in a later batch than the four in force.
	eventually(t, "five routes received", 10*time.Second, func() bool { return ag.Status().BGP.Received == 5 })
	s := ag.Status()
	if s.BGP.Received != 5 || s.BGP.Accepted != 4 || s.BGP.Refused != 1 {
		t.Errorf("routes received/accepted/refused %d/%d/%d, want 5/4/1", s.BGP.Received, s.BGP.Accepted, s.BGP.Refused)
	}
	for _, r := range s.BGP.Routes {
		if r.State == RouteRefused && !strings.Contains(r.Reason, "redirect to VRF") {
			t.Errorf("refused %s: reason %q, want redirect to VRF", r.NLRI, r.Reason)
		}
	}
	if is := s.Interfaces[0]; is.BGPRules != 4 || is.FileRules != 1 || is.BGPOrigin != OriginFlowSpec || is.FileOrigin != OriginFiles {
		t.Errorf("status: %d bgp rules (origin %s), %d file rules (origin %s); want 4 (%s), 1 (%s)", is.BGPRules, is.BGPOrigin, is.FileRules, is.FileOrigin, OriginFlowSpec, OriginFiles)
	}

	an.withdraw(t, memcached)
	eventually(t, "withdrawn route removed", 10*time.Second, func() bool { return !strings.Contains(plane.rules("test0"), "11211") })

	an.stop()
	eventually(t, "session down, routes stale", 10*time.Second, func() bool {
		s := ag.Status()
		return !s.BGP.Neighbors[0].Up && s.BGP.Stale == 4
	})
	down := time.Now()
	if !strings.Contains(plane.rules("test0"), "10.0.0.0/8") {
		t.Fatalf("stale rules removed at once: %s", plane.rules("test0"))
	}
	eventually(t, "stale rules removed", 10*time.Second, func() bool { return plane.rules("test0") == "pass udp src 192.0.2.0/24" })
	if el := time.Since(down); el < time.Second {
		t.Errorf("stale rules removed after %s, want the stale time (1.5s)", el)
	}
}

// TestReconcileBGPCollision: a FlowSpec route one of whose rules has a
// prefix another origin holds is refused as a whole on that interface
// (never installed narrower), with the reason in its status; the other
// routes go in; the same routes again are no swap and keep the refusal.
func TestReconcileBGPCollision(t *testing.T) {
	cfg, err := ParseConfig([]byte("interfaces:\n  - name: test0\n    policy: pass\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plane := &fakePlane{collide: map[string]string{"drop src 198.51.100.7/32": "prefix 198.51.100.7/32 on test0 is a rule of origin drop already"}}
	ag, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), plane: plane})
	if err != nil {
		t.Fatal(err)
	}
	routes := func() []RouteStatus {
		return []RouteStatus{
			{Neighbor: "127.0.0.2", Family: FamilyIPv4FlowSpec, NLRI: "a", State: RouteAccepted, Rules: []string{"drop udp dport 1"}},
			{Neighbor: "127.0.0.2", Family: FamilyIPv4FlowSpec, NLRI: "b", State: RouteAccepted, Rules: []string{"drop udp dport 2", "drop src 198.51.100.7/32"}},
		}
	}
	rules := mustRules(t, "drop udp dport 1\ndrop udp dport 2\ndrop src 198.51.100.7/32\n").Rules
	owner := []int{0, 1, 1}
	ic := cfg.Interfaces[0]
	rs := routes()
	ag.reconcileBGP(ic, rs, rules, owner)
	if got := plane.rules("test0"); got != "drop udp dport 1" {
		t.Fatalf("rules in force %q, want route a's only", got)
	}
	if rs[1].State != RouteRefused || !strings.Contains(rs[1].Reason, "is a rule of origin drop already") || rs[1].Rules != nil {
		t.Fatalf("route b: %+v, want refused with the reason", rs[1])
	}
	if rs[0].State != RouteAccepted {
		t.Fatalf("route a: %+v", rs[0])
	}
	swaps := plane.swaps
	rs = routes()
	ag.reconcileBGP(ic, rs, rules, owner)
	if plane.swaps != swaps {
		t.Fatal("the same routes again: swapped again")
	}
	if rs[1].State != RouteRefused {
		t.Fatalf("route b after a pass without a swap: %+v, want still refused", rs[1])
	}
	if st := ag.Status(); st.Interfaces[0].BGPRules != 1 {
		t.Fatalf("status: %d bgp rules, want 1", st.Interfaces[0].BGPRules)
	}
}

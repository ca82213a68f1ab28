package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/osrg/gobgp/v3/pkg/server"
)

// speaker is the embedded gobgp server and the FlowSpec routes of each
// neighbour: those of its session now, and those of a session that went
// down, kept until the stale time ends (or the neighbour announces them
// again).
type speaker struct {
	cfg      *BGPConfig
	log      *slog.Logger
	onChange func()
	srv      *server.BgpServer

	mu      sync.Mutex
	started bool // start has returned (tests wait for it: gobgp sets package variables when it starts)
	peers   map[string]*peerState
	order   []string // neighbour addresses in config order
}

type peerState struct {
	cfg    NeighborConfig
	state  string
	since  time.Time
	routes map[string]heldRoute // by family and NLRI
	stale  map[string]heldRoute
	until  time.Time // when the stale routes go
}

// heldRoute is a route a neighbour sent.
type heldRoute struct {
	key      string // the NLRI as gobgp writes it
	neighbor string
	route    Route
	actions  string
	stale    bool
}

func newSpeaker(cfg *BGPConfig, log *slog.Logger, onChange func()) *speaker {
	s := &speaker{cfg: cfg, log: log, onChange: onChange, peers: map[string]*peerState{}}
	for _, n := range cfg.Neighbors {
		s.peers[n.Address] = &peerState{cfg: n, state: "idle", since: time.Now(), routes: map[string]heldRoute{}, stale: map[string]heldRoute{}}
		s.order = append(s.order, n.Address)
	}
	return s
}

func flowSpecFamily(f string) *api.Family {
	if f == FamilyIPv6FlowSpec {
		return &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_FLOW_SPEC_UNICAST}
	}
	return &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_FLOW_SPEC_UNICAST}
}

// start starts gobgp, adds the neighbours and follows their sessions and
// routes.
func (s *speaker) start(ctx context.Context) error {
	s.srv = server.NewBgpServer(server.LoggerOption(&gobgpLogger{log: s.log}))
	go s.srv.Serve()
	g := &api.Global{Asn: s.cfg.LocalAS, RouterId: s.cfg.RouterID, ListenPort: s.cfg.ListenPort, ListenAddresses: s.cfg.ListenAddresses}
	if err := s.srv.StartBgp(ctx, &api.StartBgpRequest{Global: g}); err != nil {
		s.srv.Stop()
		return fmt.Errorf("start BGP (local_as %d, listen port %d): %w", s.cfg.LocalAS, s.cfg.ListenPort, err)
	}
	for _, n := range s.cfg.Neighbors {
		p, err := peerOf(n)
		if err != nil {
			s.stop()
			return err
		}
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: p}); err != nil {
			s.stop()
			return fmt.Errorf("BGP neighbor %s: %w", n.Address, err)
		}
	}
	err := s.srv.WatchEvent(ctx, &api.WatchEventRequest{
		Peer:  &api.WatchEventRequest_Peer{},
		Table: &api.WatchEventRequest_Table{Filters: []*api.WatchEventRequest_Table_Filter{{Type: api.WatchEventRequest_Table_Filter_ADJIN, Init: true}}},
	}, func(r *api.WatchEventResponse) {
		// One goroutine delivers the events in order: a session's state
		// changes and the paths of each UPDATE received (announcements
		// and withdrawals), so the routes held follow them one by one.
		if p := r.GetPeer(); p != nil && p.GetPeer() != nil {
			s.peerEvent(p.GetPeer())
		}
		if t := r.GetTable(); t != nil && len(t.Paths) > 0 {
			s.pathsEvent(t.Paths)
		}
	})
	if err != nil {
		s.stop()
		return fmt.Errorf("follow BGP events: %w", err)
	}
	s.mu.Lock()
	s.started = true
	s.mu.Unlock()
	return nil
}

func (s *speaker) isStarted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

func peerOf(n NeighborConfig) (*api.Peer, error) {
	pw := n.Password
	if n.PasswordFile != "" {
		b, err := os.ReadFile(n.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("BGP neighbor %s: password_file: %w", n.Address, err)
		}
		pw = strings.TrimRight(string(b), "\r\n")
	}
	p := &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: n.Address, PeerAsn: n.AS, AuthPassword: pw},
		Transport: &api.Transport{PassiveMode: n.Passive, RemotePort: uint32(n.Port), LocalAddress: n.LocalAddress},
		Timers:    &api.Timers{Config: &api.TimersConfig{}},
	}
	if n.HoldTime > 0 {
		p.Timers.Config.HoldTime = uint64(n.HoldTime / time.Second)
		p.Timers.Config.KeepaliveInterval = uint64(n.HoldTime / time.Second / 3)
	}
	if n.ConnectRetry > 0 {
		p.Timers.Config.ConnectRetry = uint64(max(n.ConnectRetry/time.Second, 1))
	} else {
		p.Timers.Config.ConnectRetry = 5
	}
	for _, f := range n.Families {
		p.AfiSafis = append(p.AfiSafis, &api.AfiSafi{Config: &api.AfiSafiConfig{Family: flowSpecFamily(f), Enabled: true}})
	}
	return p, nil
}

func (s *speaker) stop() {
	if s.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.StopBgp(ctx, &api.StopBgpRequest{})
	s.srv.Stop()
}

// peerEvent follows a session's state; a session that leaves established
// makes its routes stale.
func (s *speaker) peerEvent(p *api.Peer) {
	addr := p.GetConf().GetNeighborAddress()
	state := strings.ToLower(strings.TrimPrefix(p.GetState().GetSessionState().String(), "SESSION_STATE_"))
	s.mu.Lock()
	ps := s.peers[addr]
	if ps == nil || ps.state == state {
		s.mu.Unlock()
		return
	}
	was := ps.state
	ps.state, ps.since = state, time.Now()
	if was == "established" && len(ps.routes) > 0 {
		for k, r := range ps.routes {
			r.stale = true
			ps.stale[k] = r
		}
		ps.routes = map[string]heldRoute{}
		ps.until = time.Now().Add(s.cfg.StaleTime)
	}
	n := len(ps.stale)
	s.mu.Unlock()
	if was == "established" {
		s.log.Warn("BGP session down", "neighbor", addr, "state", state, "stale_routes", n, "stale_time", s.cfg.StaleTime.String())
	} else if state == "established" {
		s.log.Info("BGP session up", "neighbor", addr)
	}
	s.onChange()
}

// pathsEvent applies the paths of UPDATEs received (the Adj-RIB-In's
// changes, as the watch delivers them): an announcement puts the route in
// its neighbour's routes (replacing one with the same NLRI: an implicit
// withdrawal), a withdrawal takes it out. A route announced again is not
// stale any more. Only the paths of an established session count: one
// that went down has its routes stale already (peerEvent).
func (s *speaker) pathsEvent(paths []*api.Path) {
	changed := false
	s.mu.Lock()
	for _, p := range paths {
		addr := p.GetNeighborIp()
		ps := s.peers[addr]
		if ps == nil || ps.state != "established" || p.GetNlri() == nil {
			continue // not a neighbour's, or an End-of-RIB marker
		}
		if p.IsWithdraw {
			key, ok := s.nlriKey(addr, p)
			if !ok {
				continue
			}
			if _, held := ps.routes[key]; held {
				delete(ps.routes, key)
				changed = true
			}
			continue
		}
		h, ok := s.held(addr, p)
		if !ok {
			continue
		}
		if old, held := ps.routes[h.key]; !held || old.actions != h.actions {
			changed = true
		}
		ps.routes[h.key] = h
		if _, ok := ps.stale[h.key]; ok { // announced again: fresh
			delete(ps.stale, h.key)
			changed = true
		}
	}
	s.mu.Unlock()
	if changed {
		s.onChange()
	}
}

// nlriKey is the key of a path's NLRI (as held uses).
func (s *speaker) nlriKey(addr string, p *api.Path) (string, bool) {
	nlri, err := apiutil.GetNativeNlri(p)
	if err != nil {
		s.log.Warn("FlowSpec withdrawal not decoded", "neighbor", addr, "error", err)
		return "", false
	}
	return nlri.String(), true
}

// held converts a gobgp path into a route.
func (s *speaker) held(addr string, p *api.Path) (heldRoute, bool) {
	if p.IsWithdraw {
		return heldRoute{}, false
	}
	nlri, err := apiutil.GetNativeNlri(p)
	if err != nil {
		s.log.Warn("FlowSpec route not decoded", "neighbor", addr, "error", err)
		return heldRoute{}, false
	}
	h := heldRoute{neighbor: addr, key: nlri.String()}
	switch n := nlri.(type) {
	case *bgp.FlowSpecIPv4Unicast:
		h.route = Route{Family: 4, Components: n.Value}
	case *bgp.FlowSpecIPv6Unicast:
		h.route = Route{Family: 6, Components: n.Value}
	default:
		return heldRoute{}, false
	}
	attrs, err := apiutil.GetNativePathAttributes(p)
	if err != nil {
		s.log.Warn("FlowSpec route attributes not decoded", "neighbor", addr, "route", h.key, "error", err)
	}
	var acts []string
	for _, a := range attrs {
		if ec, ok := a.(*bgp.PathAttributeExtendedCommunities); ok {
			h.route.Actions = append(h.route.Actions, ec.Value...)
			for _, v := range ec.Value {
				acts = append(acts, v.String())
			}
		}
	}
	h.actions = strings.Join(acts, " ")
	if h.actions == "" {
		h.actions = "none"
	}
	return h, true
}

// expire removes stale routes whose time has come.
func (s *speaker) expire(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for addr, ps := range s.peers {
		if len(ps.stale) > 0 && !now.Before(ps.until) {
			s.log.Info("stale FlowSpec routes removed", "neighbor", addr, "routes", len(ps.stale))
			ps.stale = map[string]heldRoute{}
		}
	}
}

// nextExpiry is when the next stale routes go.
func (s *speaker) nextExpiry() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	for _, ps := range s.peers {
		if len(ps.stale) > 0 && (next.IsZero() || ps.until.Before(next)) {
			next = ps.until
		}
	}
	return next, !next.IsZero()
}

// routes are every route held, fresh and stale, neighbours in config order.
func (s *speaker) routes() []heldRoute {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []heldRoute
	for _, addr := range s.order {
		ps := s.peers[addr]
		var keys []string
		for k := range ps.routes {
			keys = append(keys, k)
		}
		for k := range ps.stale {
			if _, ok := ps.routes[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			if r, ok := ps.routes[k]; ok {
				out = append(out, r)
			} else {
				out = append(out, ps.stale[k])
			}
		}
	}
	return out
}

func (s *speaker) neighbors() []NeighborStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []NeighborStatus
	for _, addr := range s.order {
		ps := s.peers[addr]
		out = append(out, NeighborStatus{Address: addr, AS: ps.cfg.AS, State: ps.state, Up: ps.state == "established", Since: ps.since})
	}
	return out
}

// gobgpLogger sends gobgp's log to the agent's, one line per event.
type gobgpLogger struct {
	log   *slog.Logger
	level gobgplog.LogLevel
}

func (l *gobgpLogger) attrs(f gobgplog.Fields) []any {
	out := make([]any, 0, 2*len(f)+2)
	out = append(out, "component", "gobgp")
	for k, v := range f {
		out = append(out, k, v)
	}
	return out
}

func (l *gobgpLogger) Panic(msg string, f gobgplog.Fields) {
	l.log.Error(msg, l.attrs(f)...)
	panic(msg)
}
func (l *gobgpLogger) Fatal(msg string, f gobgplog.Fields) { l.log.Error(msg, l.attrs(f)...) }
func (l *gobgpLogger) Error(msg string, f gobgplog.Fields) { l.log.Error(msg, l.attrs(f)...) }
func (l *gobgpLogger) Warn(msg string, f gobgplog.Fields)  { l.log.Warn(msg, l.attrs(f)...) }
func (l *gobgpLogger) Info(msg string, f gobgplog.Fields)  { l.log.Debug(msg, l.attrs(f)...) }
func (l *gobgpLogger) Debug(msg string, f gobgplog.Fields) {}
func (l *gobgpLogger) SetLevel(level gobgplog.LogLevel)    { l.level = level }
func (l *gobgpLogger) GetLevel() gobgplog.LogLevel         { return l.level }

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Route states in status.
const (
	RouteAccepted = "accepted" // its rules are in force
	RouteRefused  = "refused"  // not expressible exactly, or no room: not installed
	RouteShadowed = "shadowed" // the same NLRI from another neighbour is in force
)

// Status is the agent's state, as /status and the status file give it
// (the JSON field names are stable; docs/AGENT.md lists them).
type Status struct {
	Config     string            `json:"config"`
	Started    time.Time         `json:"started"`
	Ready      bool              `json:"ready"` // every interface has its rules in force
	Swaps      uint64            `json:"swaps"` // rule-set swaps since start
	Interfaces []InterfaceStatus `json:"interfaces"`
	Files      []FileStatus      `json:"files"`
	BGP        *BGPStatus        `json:"bgp,omitempty"`
}

// InterfaceStatus is one interface. The rules themselves are in the
// program (xdpdrop rules list --iface NAME shows each with its origin);
// a FlowSpec route's rules are in its RouteStatus.
type InterfaceStatus struct {
	Name       string `json:"name"`
	InForce    bool   `json:"in_force"` // the agent's rules are in force
	Mode       string `json:"mode,omitempty"`
	Policy     string `json:"policy,omitempty"` // policy/malformed of the interface
	FileOrigin string `json:"file_origin"`      // the origin of the file rules (agent:file)
	BGPOrigin  string `json:"bgp_origin"`       // the origin of the FlowSpec rules (agent:flowspec)
	FileRules  int    `json:"file_rules"`       // in force from rule files and inline rules
	BGPRules   int    `json:"bgp_rules"`        // in force from FlowSpec routes
	// InheritedRules of BGPRules are a previous agent's, kept for the
	// stale time after a restart (docs/AGENT.md, Restarts).
	InheritedRules int `json:"inherited_rules,omitempty"`
	// RefusedRules are file rules not installed, with the reason: their
	// prefix is a prefix rule of another origin already (at most 100
	// listed; Refused counts them all).
	RefusedRules []string  `json:"refused_rules,omitempty"`
	Refused      int       `json:"refused,omitempty"`
	Applied      time.Time `json:"applied,omitempty"`
	Error        string    `json:"error,omitempty"` // the last swap failed: the rules before it stay in force
}

// FileStatus is one rule file.
type FileStatus struct {
	Path   string    `json:"path"`
	Rules  int       `json:"rules"` // in force from it
	Loaded time.Time `json:"loaded,omitempty"`
	Error  string    `json:"error,omitempty"` // the last read failed: its last good rules stay in force
}

// BGPStatus is the BGP speaker and its routes.
type BGPStatus struct {
	LocalAS   uint32           `json:"local_as"`
	RouterID  string           `json:"router_id"`
	Neighbors []NeighborStatus `json:"neighbors"`
	Received  int              `json:"routes_received"`
	Accepted  int              `json:"routes_accepted"`
	Refused   int              `json:"routes_refused"`
	Stale     int              `json:"routes_stale"`
	Routes    []RouteStatus    `json:"routes"`
}

// NeighborStatus is one BGP neighbour.
type NeighborStatus struct {
	Address  string    `json:"address"`
	AS       uint32    `json:"as"`
	State    string    `json:"state"` // idle, connect, active, opensent, openconfirm, established
	Up       bool      `json:"up"`
	Since    time.Time `json:"since,omitempty"` // of the state
	Received int       `json:"routes_received"`
	Accepted int       `json:"routes_accepted"`
	Refused  int       `json:"routes_refused"`
	Stale    int       `json:"routes_stale"`
}

// RouteStatus is one FlowSpec route.
type RouteStatus struct {
	Neighbor string   `json:"neighbor"`
	Family   string   `json:"family"`
	NLRI     string   `json:"nlri"`    // as gobgp writes it
	Actions  string   `json:"actions"` // the FlowSpec action communities
	State    string   `json:"state"`   // accepted, refused, shadowed
	Stale    bool     `json:"stale"`   // its session is down: removed when the stale time ends
	Reason   string   `json:"reason,omitempty"`
	Rules    []string `json:"rules,omitempty"` // what it became
}

// Status returns the agent's state now.
func (a *Agent) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Status{Config: a.cfg.path, Started: a.start, Ready: true, Swaps: a.swaps}
	for _, ic := range a.cfg.Interfaces {
		st := a.ifaces[ic.Name]
		inForce := st.fileIn && st.bgpIn
		is := InterfaceStatus{Name: ic.Name, InForce: inForce, Mode: st.mode, Policy: st.policy,
			FileOrigin: OriginFiles, BGPOrigin: OriginFlowSpec, FileRules: st.fileRules, BGPRules: st.bgpRules,
			InheritedRules: st.inherited, RefusedRules: st.refused, Refused: st.nrefused, Applied: st.applied}
		if st.err != nil {
			is.Error = st.err.Error()
		}
		s.Ready = s.Ready && inForce
		s.Interfaces = append(s.Interfaces, is)
	}
	for path, fs := range a.files {
		f := FileStatus{Path: path, Rules: ruleCount(fs.rules), Loaded: fs.loaded}
		if fs.err != nil {
			f.Error = fs.err.Error()
		}
		s.Files = append(s.Files, f)
	}
	sort.Slice(s.Files, func(i, j int) bool { return s.Files[i].Path < s.Files[j].Path })
	if a.bgp != nil {
		b := &BGPStatus{LocalAS: a.cfg.BGP.LocalAS, RouterID: a.cfg.BGP.RouterID, Routes: append([]RouteStatus{}, a.routes...)}
		byPeer := map[string]*NeighborStatus{}
		for _, n := range a.bgp.neighbors() {
			n := n
			b.Neighbors = append(b.Neighbors, n)
		}
		for i := range b.Neighbors {
			byPeer[b.Neighbors[i].Address] = &b.Neighbors[i]
		}
		for _, r := range b.Routes {
			b.Received++
			n := byPeer[r.Neighbor]
			if n != nil {
				n.Received++
			}
			switch r.State {
			case RouteAccepted:
				b.Accepted++
				if n != nil {
					n.Accepted++
				}
			case RouteRefused:
				b.Refused++
				if n != nil {
					n.Refused++
				}
			}
			if r.Stale {
				b.Stale++
				if n != nil {
					n.Stale++
				}
			}
		}
		s.BGP = b
	}
	return s
}

func (a *Agent) statusJSON() ([]byte, error) {
	return json.MarshalIndent(a.Status(), "", "  ")
}

// serveStatus serves /status, /healthz and /metrics on cfg.Status.Listen.
func (a *Agent) serveStatus(ctx context.Context) (*http.Server, error) {
	ln, err := net.Listen("tcp", a.cfg.Status.Listen)
	if err != nil {
		return nil, fmt.Errorf("status listen %s: %w", a.cfg.Status.Listen, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{a: a})
	mux := http.NewServeMux()
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		b, err := a.statusJSON()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(b, '\n'))
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if !a.Status().Ready {
			http.Error(w, "not ready: an interface has no rules in force yet (see /status)", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("status endpoint stopped", "error", err)
		}
	}()
	a.log.Info("status endpoint", "listen", ln.Addr().String())
	return srv, nil
}

// collector exports the agent's state as Prometheus metrics.
type collector struct{ a *Agent }

var (
	descSessionUp = prometheus.NewDesc("xdpdrop_bgp_session_up", "1 if the BGP session with the neighbour is established.", []string{"neighbor"}, nil)
	descRoutes    = prometheus.NewDesc("xdpdrop_bgp_routes", "FlowSpec routes held, by state (accepted, refused, shadowed, stale).", []string{"state"}, nil)
	descFileError = prometheus.NewDesc("xdpdrop_agent_rule_file_error", "1 if the rule file's last read failed (its last good rules stay in force).", []string{"file"}, nil)
	descRules     = prometheus.NewDesc("xdpdrop_agent_rules", "Rules in force on the interface, by origin (file, bgp).", []string{"interface", "origin"}, nil)
	descSwaps     = prometheus.NewDesc("xdpdrop_agent_swaps_total", "Rule-set swaps since the agent started.", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessionUp, descRoutes, descFileError, descRules, descSwaps} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.a.Status()
	ch <- prometheus.MustNewConstMetric(descSwaps, prometheus.CounterValue, float64(s.Swaps))
	for _, f := range s.Files {
		v := 0.0
		if f.Error != "" {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descFileError, prometheus.GaugeValue, v, f.Path)
	}
	for _, i := range s.Interfaces {
		ch <- prometheus.MustNewConstMetric(descRules, prometheus.GaugeValue, float64(i.FileRules), i.Name, "file")
		ch <- prometheus.MustNewConstMetric(descRules, prometheus.GaugeValue, float64(i.BGPRules), i.Name, "bgp")
	}
	if s.BGP == nil {
		return
	}
	for _, n := range s.BGP.Neighbors {
		v := 0.0
		if n.Up {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descSessionUp, prometheus.GaugeValue, v, n.Address)
	}
	shadowed := 0
	for _, r := range s.BGP.Routes {
		if r.State == RouteShadowed {
			shadowed++
		}
	}
	for st, n := range map[string]int{RouteAccepted: s.BGP.Accepted, RouteRefused: s.BGP.Refused, RouteShadowed: shadowed, "stale": s.BGP.Stale} {
		ch <- prometheus.MustNewConstMetric(descRoutes, prometheus.GaugeValue, float64(n), st)
	}
}

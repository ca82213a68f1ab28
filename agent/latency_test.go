package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// recPlane is the kernel plane, recording when each rule was first in
// force: when the apply that put it in returned.
type recPlane struct {
	inner dataplane
	mu    sync.Mutex
	first map[string]time.Time // rule text -> in force since
	swaps int
}

func (p *recPlane) apply(ic InterfaceConfig, origin string, rs *fastdrop.RuleSet) (applied, error) {
	t0 := time.Now()
	res, err := p.inner.apply(ic, origin, rs)
	now := time.Now()
	if os.Getenv("XDPDROP_BENCH_DEBUG") != "" {
		fmt.Fprintf(os.Stderr, "apply %d rules: %s (reloaded %v)\n", len(rs.Rules), now.Sub(t0), res.Reloaded)
	}
	if err == nil {
		p.mu.Lock()
		for i := range rs.Rules {
			s := rs.Rules[i].String()
			if _, ok := p.first[s]; !ok {
				p.first[s] = now
			}
		}
		p.swaps++
		p.mu.Unlock()
	}
	return res, err
}

func (p *recPlane) reset() {
	p.mu.Lock()
	p.first, p.swaps = map[string]time.Time{}, 0
	p.mu.Unlock()
}

// benchRoutesOf are n FlowSpec routes "destination 198.18.x.y/32, UDP,
// discard", one per address (compound rules), or with dstOnly
// "destination 198.18.x.y/32, discard" (destination prefix rules).
func benchRoutesOf(b testing.TB, n int, withdraw, dstOnly bool) []*api.Path {
	out := make([]*api.Path, n)
	base := netip.MustParseAddr("198.18.0.0").As4()
	for i := range n {
		a := base
		a[2], a[3] = byte(i>>8), byte(i)
		comps := []bgp.FlowSpecComponentInterface{dst4(netip.AddrFrom4(a).String() + "/32")}
		if !dstOnly {
			comps = append(comps, comp(fsProto, item("=", 17)))
		}
		out[i] = flowPath(b, withdraw, 4, comps, bgp.NewTrafficRateExtended(0, 0))
	}
	return out
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// BenchmarkAnnounceToInForce measures, for a burst of 1, 1,000 and 10,000
// routes announced at once by a second gobgp over loopback, the time from
// each route's arrival at the agent's speaker (the time gobgp read the
// UPDATE that carried it) to its rule being in force on a veth (the rule
// set swap that holds it returned). One iteration announces the burst and
// withdraws it. Only the routes the compound-rule table has room for are
// installed; the rest are refused (routes-in-force says how many got in,
// decided-ms how long it took until every route of the burst was either
// in force or refused). Run as root:
//
//	go test -run '^$' -bench AnnounceToInForce -benchtime 5x ./agent/
//
// The kind=dst rows announce destination-only routes ("destination
// 198.18.x.y/32, discard"), which go to the destination prefix table: all
// of the burst is put in force.
func BenchmarkAnnounceToInForce(b *testing.B) {
	for _, n := range []int{1, 1000, 10000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) { benchAnnounce(b, n, false) })
	}
	for _, n := range []int{1, 1000, 10000} {
		b.Run(fmt.Sprintf("routes=%d/kind=dst", n), func(b *testing.B) { benchAnnounce(b, n, true) })
	}
}

func benchAnnounce(b *testing.B, n int, dstOnly bool) {
	v := testenv.NewVeth(b, testenv.VethOptions{})
	pins := testenv.TempPinDir(b)
	port := freePort(b)
	cfg, err := ParseConfig([]byte(fmt.Sprintf(`
pin_root: %s
interfaces:
  - name: %s
    policy: pass
bgp:
  local_as: 65001
  router_id: 127.0.0.1
  listen_addresses: [127.0.0.1]
  listen_port: %d
  neighbors:
    - address: 127.0.0.2
      as: 65000
      passive: true
`, pins, v.Name, port)), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	plane := &recPlane{inner: &kernelPlane{pinRoot: pins, cfg: cfg}}
	plane.reset()
	ag, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), plane: plane})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(b, "speaker started", 10*time.Second, ag.bgp.isStarted)
	an := newAnnouncer(b, port)
	eventually(b, "session up", 20*time.Second, func() bool {
		s := ag.Status()
		return s.BGP != nil && len(s.BGP.Neighbors) == 1 && s.BGP.Neighbors[0].Up
	})
	// Arrival: when the agent's gobgp hands the route to its watchers,
	// the agent's speaker among them (gobgp reads the UPDATE just before).
	var amu sync.Mutex
	arrived := map[string]time.Time{}
	err = ag.bgp.srv.WatchEvent(ctx, &api.WatchEventRequest{Table: &api.WatchEventRequest_Table{Filters: []*api.WatchEventRequest_Table_Filter{{Type: api.WatchEventRequest_Table_Filter_ADJIN}}}}, func(r *api.WatchEventResponse) {
		now := time.Now()
		amu.Lock()
		defer amu.Unlock()
		for _, p := range r.GetTable().GetPaths() {
			if nlri, err := apiutil.GetNativeNlri(p); err == nil && !p.IsWithdraw {
				if _, ok := arrived[nlri.String()]; !ok {
					arrived[nlri.String()] = now
				}
			}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	ann, wd := benchRoutesOf(b, n, false, dstOnly), benchRoutesOf(b, n, true, dstOnly)
	var fromAnnounce []time.Duration
	sent := make(map[string]time.Time, n)
	keys := make([]string, n)
	for i, p := range ann {
		nlri, err := apiutil.GetNativeNlri(p)
		if err != nil {
			b.Fatal(err)
		}
		keys[i] = nlri.String()
	}
	var lat []time.Duration
	var decided []time.Duration
	inForce, swaps := 0, 0
	b.ResetTimer()
	for range b.N {
		plane.reset()
		amu.Lock()
		clear(arrived)
		amu.Unlock()
		t0 := time.Now()
		for i, p := range ann {
			sent[keys[i]] = time.Now()
			an.announce(b, p)
		}
		var st Status
		eventually(b, "every route in force or refused", 120*time.Second, func() bool {
			st = ag.Status()
			if st.BGP.Received != n {
				return false
			}
			plane.mu.Lock()
			defer plane.mu.Unlock()
			for _, r := range st.BGP.Routes {
				if r.State == RouteAccepted {
					if _, ok := plane.first[r.Rules[0]]; !ok {
						return false
					}
				}
			}
			return true
		})
		decided = append(decided, time.Since(t0))
		amu.Lock()
		plane.mu.Lock()
		k := 0
		for _, r := range st.BGP.Routes {
			if r.State != RouteAccepted {
				continue
			}
			at, ok := arrived[r.NLRI]
			if !ok {
				b.Fatalf("route %s: no arrival time", r.NLRI)
			}
			lat = append(lat, plane.first[r.Rules[0]].Sub(at))
			fromAnnounce = append(fromAnnounce, plane.first[r.Rules[0]].Sub(sent[r.NLRI]))
			if os.Getenv("XDPDROP_BENCH_DEBUG") != "" && k < 3 {
				b.Logf("t0 %s arrived %s in force %s", t0.Format(time.StampMicro), at.Format(time.StampMicro), plane.first[r.Rules[0]].Format(time.StampMicro))
			}
			k++
		}
		inForce, swaps = k, plane.swaps
		plane.mu.Unlock()
		amu.Unlock()
		for _, p := range wd {
			an.withdraw(b, p)
		}
		eventually(b, "every route withdrawn", 120*time.Second, func() bool {
			s := ag.Status()
			return s.BGP.Received == 0 && s.Interfaces[0].BGPRules == 0
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(quantile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(quantile(lat, 0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(quantile(fromAnnounce, 0.5).Microseconds())/1000, "announce-p50-ms")
	b.ReportMetric(float64(quantile(fromAnnounce, 0.99).Microseconds())/1000, "announce-p99-ms")
	b.ReportMetric(float64(quantile(decided, 0.5).Microseconds())/1000, "decided-ms")
	b.ReportMetric(float64(inForce), "routes-in-force")
	b.ReportMetric(float64(swaps), "swaps/burst")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkAgentMemory runs the xdpdrop binary's agent with a rule file of
// 1M source prefixes and 10,000 FlowSpec routes announced by a second
// gobgp over loopback, and reports its resident memory (VmRSS) and peak
// (VmHWM) once every route is in force or refused, and the kernel memory
// of the program's maps (their memlock). XDPDROP_BENCH_DST=1 announces
// destination-only routes (all 10,000 in force, in the destination prefix
// table) instead of destination + UDP ones (256 in force). Run as root:
//
//	go test -run '^$' -bench AgentMemory -benchtime 1x ./agent/
func BenchmarkAgentMemory(b *testing.B) {
	testenv.RequireRoot(b)
	v := testenv.NewVeth(b, testenv.VethOptions{})
	pins := testenv.TempPinDir(b)
	dir := b.TempDir()
	bin := filepath.Join(dir, "xdpdrop")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/xdpdrop").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	rules := filepath.Join(dir, "1m.rules")
	f, err := os.Create(rules)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := range 1 << 20 { // distinct /32s in 10.0.0.0/8 and 11.0.0.0/8
		fmt.Fprintf(w, "drop src %d.%d.%d.%d/32\n", 10+i>>24, byte(i>>16), byte(i>>8), byte(i))
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	status := filepath.Join(dir, "status.json")
	port := freePort(b)
	cfg := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
pin_root: %s
status:
  file: %s
interfaces:
  - name: %s
    rule_files: [%s]
bgp:
  local_as: 65001
  router_id: 127.0.0.1
  listen_addresses: [127.0.0.1]
  listen_port: %d
  neighbors:
    - address: 127.0.0.2
      as: 65000
      passive: true
`, pins, status, v.Name, rules, port)), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "agent", "--config", cfg)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	read := func() Status {
		time.Sleep(100 * time.Millisecond)
		var s Status
		if bs, err := os.ReadFile(status); err == nil {
			_ = jsonUnmarshal(bs, &s)
		}
		return s
	}
	eventually(b, "file rules in force", 120*time.Second, func() bool { return read().Ready })
	base := procMem(b, cmd.Process.Pid)
	b.Logf("agent: 1M file prefixes in force: VmRSS %s, VmHWM %s", base["VmRSS"], base["VmHWM"])
	an := newAnnouncer(b, port)
	eventually(b, "session up", 300*time.Second, func() bool {
		s := read()
		return s.BGP != nil && len(s.BGP.Neighbors) == 1 && s.BGP.Neighbors[0].Up
	})
	dstOnly := os.Getenv("XDPDROP_BENCH_DST") == "1"
	b.Logf("agent: 1M file prefixes in force: kernel maps %s", mapsMemlock(b, pins))
	// One route with the 1M file rules in force: what a BGP change costs.
	one := benchRoutesOf(b, 10001, false, dstOnly)[10000]
	t0 := time.Now()
	an.announce(b, one)
	eventually(b, "1 route received", 600*time.Second, func() bool {
		s := read()
		return s.BGP != nil && s.BGP.Received == 1
	})
	b.Logf("agent: 1M file prefixes: 1 route decided (in status) after %s", time.Since(t0).Round(time.Millisecond))
	an.withdraw(b, benchRoutesOf(b, 10001, true, dstOnly)[10000])
	eventually(b, "1 route withdrawn", 600*time.Second, func() bool {
		s := read()
		return s.BGP != nil && s.BGP.Received == 0
	})
	t0 = time.Now()
	for _, p := range benchRoutesOf(b, 10000, false, dstOnly) {
		an.announce(b, p)
	}
	eventually(b, "10,000 routes received", 600*time.Second, func() bool {
		s := read()
		return s.BGP != nil && s.BGP.Received == 10000
	})
	b.Logf("agent: 1M file prefixes: 10,000 routes decided (in status) after %s", time.Since(t0).Round(time.Millisecond))
	eventually(b, "the routes' rules in force", 600*time.Second, func() bool {
		s := read()
		return len(s.Interfaces) == 1 && s.Interfaces[0].BGPRules == s.BGP.Accepted
	})
	s := read()
	m := procMem(b, cmd.Process.Pid)
	b.Logf("agent: 1M file prefixes: VmRSS %s; with 10,000 FlowSpec routes (%d accepted, %d refused, %d rules in force): %s; kernel maps %s", base["VmRSS"], s.BGP.Accepted, s.BGP.Refused, s.Interfaces[0].BGPRules, strings.Join([]string{"VmRSS " + m["VmRSS"], "VmHWM " + m["VmHWM"]}, ", "), mapsMemlock(b, pins))
	b.ReportMetric(0, "ns/op")
}

// mapsMemlock sums the kernel memory (memlock) of the maps pinned under
// pins, as bpftool reports it.
func mapsMemlock(b *testing.B, pins string) string {
	var total int64
	n := 0
	_ = filepath.WalkDir(pins, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		m, err := ebpf.LoadPinnedMap(path, nil)
		if err != nil {
			return nil // a program, a link
		}
		defer m.Close()
		out, err := exec.Command("bpftool", "-j", "map", "show", "pinned", path).Output()
		if err != nil {
			return nil
		}
		var info struct {
			Bytes int64 `json:"bytes_memlock"`
		}
		if json.Unmarshal(out, &info) == nil {
			total += info.Bytes
			n++
		}
		return nil
	})
	return fmt.Sprintf("%d MiB in %d maps", total>>20, n)
}

// procMem reads the Vm* lines of /proc/PID/status.
func procMem(b *testing.B, pid int) map[string]string {
	bs, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(bs), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.HasPrefix(k, "Vm") {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

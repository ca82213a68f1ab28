package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// srcCounter counts per IPv4 source the frames that reach the stack of an
// interface: a tcx ingress program, which sees what the XDP program
// passed, counts them in a hash map and drops them (the stack has nothing
// to do with them). It also keeps, per source, the times of the first and
// the last frame it counted: while a limit is flooded, frames pass all
// along, so those say how long the flood really ran (a generator's own
// time, on a loaded machine, can be a second longer than it sent).
type srcCounter struct {
	m *ebpf.Map
}

// srcCount is a srcCounter value: frames, and the first and last one's
// bpf_ktime_get_ns.
type srcCount struct {
	N, First, Last uint64
}

func newSrcCounter(t *testing.T, ifindex int) *srcCounter {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 24, MaxEntries: 1 << 17})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	// struct __sk_buff: data at 76, data_end at 80.
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, 76, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, 80, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 34),
		asm.JGT.Reg(asm.R4, asm.R3, "out"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
		asm.JNE.Imm(asm.R5, 0x0008, "out"), // ETH_P_IP, as loaded on a little-endian CPU
		asm.LoadMem(asm.R5, asm.R2, 26, asm.Word),
		asm.StoreMem(asm.RFP, -4, asm.R5, asm.Word),
		asm.FnKtimeGetNs.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "new"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.StoreMem(asm.R0, 16, asm.R7, asm.DWord),
		asm.Ja.Label("out"),
		asm.Mov.Imm(asm.R1, 1).WithSymbol("new"),
		asm.StoreMem(asm.RFP, -32, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, -24, asm.R7, asm.DWord),
		asm.StoreMem(asm.RFP, -16, asm.R7, asm.DWord),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -32),
		// BPF_NOEXIST: when both CPUs see a source's first frame at
		// once, the second update fails instead of overwriting the
		// first one's count; that frame is then added as any other.
		asm.Mov.Imm(asm.R4, 1),
		asm.FnMapUpdateElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.StoreMem(asm.R0, 16, asm.R7, asm.DWord),
		asm.Mov.Imm(asm.R0, 2).WithSymbol("out"), // TCX_DROP
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, Instructions: insns, License: "GPL"})
	require.NoError(t, err)
	t.Cleanup(func() { prog.Close() })
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: ebpf.AttachTCXIngress})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return &srcCounter{m: m}
}

// reset forgets what was counted.
func (c *srcCounter) reset(t *testing.T) {
	t.Helper()
	var k [4]byte
	var keys [][4]byte
	var v srcCount
	it := c.m.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	require.NoError(t, it.Err())
	for _, k := range keys {
		require.NoError(t, c.m.Delete(&k))
	}
}

// counts returns what was counted, by source.
func (c *srcCounter) counts(t *testing.T) map[netip.Addr]srcCount {
	t.Helper()
	out := make(map[netip.Addr]srcCount)
	var k [4]byte
	var v srcCount
	it := c.m.Iterate()
	for it.Next(&k, &v) {
		out[netip.AddrFrom4(k)] = v
	}
	require.NoError(t, it.Err())
	return out
}

// get returns what was counted of source a (zero if nothing).
func (c *srcCounter) get(t *testing.T, a netip.Addr) srcCount {
	t.Helper()
	var v srcCount
	k := a.As4()
	if err := c.m.Lookup(&k, &v); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		require.NoError(t, err)
	}
	return v
}

// window is the time from the first frame counted to the last, of any
// source, in s.
func window(counts map[netip.Addr]srcCount) float64 {
	var first, last uint64
	for _, c := range counts {
		if first == 0 || c.First < first {
			first = c.First
		}
		last = max(last, c.Last)
	}
	return float64(last-first) / 1e9
}

// floodTwoQueues sends UDP to dport from the peer with two generators at
// once, one pinned to each of the first two CPUs: veth puts a frame sent
// by XDP_TX on the rx queue of the sending CPU, so the frames arrive on
// both queues and are policed on both CPUs. It returns the generators'
// frames and the longer time one of them sent for.
func floodTwoQueues(t *testing.T, v *testenv.Veth, dport, flows string, d time.Duration) (frames uint64, secs float64) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for cpu := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command("taskset", "-c", fmt.Sprint(cpu), xdpdropBin, "gen", "--netns", v.NSName, "--iface", v.PeerName,
				"--dport", dport, "--flows", flows, "--duration", d.String(), "--quiet", "--json")
			r := runCLI(t, cmd)
			require.Equal(t, 0, r.code, r.stderr)
			var g struct {
				Frames  uint64  `json:"frames"`
				Seconds float64 `json:"seconds"`
			}
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &g), r.stdout)
			mu.Lock()
			frames += g.Frames
			secs = max(secs, g.Seconds)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return frames, secs
}

// TestCLILimitAccuracy is the accuracy run: each limit is offered
// more than 10 times its rate for 5 s, on a veth pair whose frames arrive
// on 2 rx queues (both CPUs police), and what passes must be within 10%
// of the rate: an aggregate limit, a per-source limit with 1 source, and a
// per-source limit with 10,000 sources (each within 10% on average, none
// over 1.5 times). What passed is counted after the XDP program, per
// source, by a tcx program on the same interface.
func TestCLILimitAccuracy(t *testing.T) {
	testenv.RequireBPFFS(t)
	v := testenv.NewVeth(t, testenv.VethOptions{Queues: 2})
	t.Cleanup(func() { _ = loader.DetachInterface(v.Name, loader.DetachOptions{}) })
	const (
		agg    = "limit 20000/s burst 20000 udp dport 9"
		one    = "limit 2000/s burst 2000 per src udp dport 10"
		many   = "limit 4/s burst 4 per src udp dport 11"
		flood  = 5 * time.Second
		within = 0.10
	)
	r := cli(t, "drop", "--iface", v.Name, "--rules", writeRules(t, agg+"\n"+one+"\n"+many+"\n"))
	require.Equal(t, 0, r.code, r.stderr)
	cnt := newSrcCounter(t, v.Index)

	// Buckets of a second: on a loaded machine the generators pause now
	// and then (a bucket refills only to its depth while nothing comes,
	// and a pause longer than it would show as frames not let through).
	// A fresh bucket passes its burst at once: set aside from the rate.
	for _, c := range []struct {
		name, rule, dport, flows string
		rate, burst              float64
		sources                  int
	}{
		{"aggregate", agg, "9", "10000", 20000, 20000, 0},
		{"per src, 1 source", one, "10", "1", 2000, 2000, 1},
		{"per src, 10000 sources", many, "11", "10000", 4, 4, 10000},
	} {
		cnt.reset(t)
		sent, genSecs := floodTwoQueues(t, v, c.dport, c.flows, flood)
		l := limitStats(t, v.Name, c.rule)
		conform, exceed := float64(l.Limit.Conform.Packets), float64(l.Limit.Exceed.Packets)
		counts := cnt.counts(t)
		secs := window(counts)
		var seen uint64
		for _, n := range counts {
			seen += n.N
		}
		offered := (conform + exceed) / secs
		t.Logf("%s: %d frames sent (the generators ran %.2fs, frames passed for %.3fs: %.0f/s offered, %.0fx the limit): %.0f conformed (%.1f/s after the burst), %d seen past XDP",
			c.name, sent, genSecs, secs, offered, offered/c.rate/max(1, float64(c.sources)), conform, (conform-c.burst*max(1, float64(c.sources)))/secs, seen)
		require.GreaterOrEqual(t, offered, 10*c.rate*max(1, float64(c.sources)), "%s: at least 10x the limit offered", c.name)
		require.InDelta(t, float64(seen), conform, 0.01*conform+10, "%s: what passed the program is what conformed", c.name)
		if c.sources <= 1 {
			require.InEpsilon(t, c.rate, (conform-c.burst)/secs, within, "%s: the rate passed", c.name)
			continue
		}
		per := make([]float64, 0, len(counts))
		for _, n := range counts {
			per = append(per, (float64(n.N)-c.burst)/secs)
		}
		slices.Sort(per)
		var sum float64
		for _, p := range per {
			sum += p
		}
		mean := sum / float64(c.sources)
		t.Logf("%s: %d sources passed; per source %.2f/s on average, min %.2f, median %.2f, max %.2f",
			c.name, len(per), mean, per[0], per[len(per)/2], per[len(per)-1])
		require.Equal(t, c.sources, len(per), "%s: every source got frames through", c.name)
		require.InEpsilon(t, c.rate, mean, within, "%s: the rate per source on average", c.name)
		// The burst (default a tenth of a second's worth, at least 1)
		// and a jiffy come on top of the rate over the run.
		require.LessOrEqual(t, per[len(per)-1], 1.5*c.rate, "%s: no source over 1.5x its rate", c.name)
	}
}

// mapsMemlock adds up the kernel memory (fdinfo's memlock) of the maps
// pinned for iface's fast drop.
func mapsMemlock(t *testing.T, iface string) uint64 {
	t.Helper()
	att, err := loader.Open(iface, loader.DefaultPinRoot)
	require.NoError(t, err)
	defer att.Close()
	ents, err := os.ReadDir(att.MapsDir())
	require.NoError(t, err)
	var total uint64
	for _, e := range ents {
		m, err := ebpf.LoadPinnedMap(filepath.Join(att.MapsDir(), e.Name()), nil)
		require.NoError(t, err)
		info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
		m.Close()
		require.NoError(t, err)
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "memlock:"); ok {
				n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				require.NoError(t, err)
				total += n
			}
		}
	}
	return total
}

// TestCLILimitSpoofedMillion: 1,048,576 spoofed sources (16 runs of the
// generator over 65,536 each, two frames a source) flood a per-source
// limit while another generator floods an aggregate limit: the maps'
// memory does not grow, the aggregate limit holds (within 10%), and the
// per-source rule counts the buckets it made and the evictions.
func TestCLILimitSpoofedMillion(t *testing.T) {
	testenv.RequireBPFFS(t)
	v := testenv.NewVeth(t, testenv.VethOptions{Queues: 2})
	t.Cleanup(func() { _ = loader.DetachInterface(v.Name, loader.DetachOptions{}) })
	const (
		perSrc = "limit 10/s per src udp dport 9"
		agg    = "limit 20000/s burst 20000 udp dport 10" // a second: see TestCLILimitAccuracy
	)
	r := cli(t, "drop", "--iface", v.Name, "--rules", writeRules(t, perSrc+"\n"+agg+"\n"))
	require.Equal(t, 0, r.code, r.stderr)
	before := mapsMemlock(t, v.Name)
	// The aggregate's frames (one source, gen's default) are counted and
	// timed past XDP; the spoofed ones fill the rest of the counter.
	cnt := newSrcCounter(t, v.Index)
	aggSrc := netip.MustParseAddr("198.18.0.2")

	done := make(chan struct{})
	go func() {
		defer close(done)
		cmd := exec.Command("taskset", "-c", "1", xdpdropBin, "gen", "--netns", v.NSName, "--iface", v.PeerName,
			"--dport", "10", "--duration", "8s", "--quiet", "--json")
		r := runCLI(t, cmd)
		require.Equal(t, 0, r.code, r.stderr)
	}()
	for cnt.get(t, aggSrc).N == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	const runs = 16
	for i := range runs {
		r := runCLI(t, exec.Command("taskset", "-c", "0", xdpdropBin, "gen", "--netns", v.NSName, "--iface", v.PeerName,
			"--src", fmt.Sprintf("10.%d.0.0", 64+i), "--flows", "65536", "--count", "131072", "--dport", "9", "--quiet"))
		require.Equal(t, 0, r.code, r.stderr)
	}
	spoofTook := time.Since(start)
	<-done
	after := mapsMemlock(t, v.Name)

	l := limitStats(t, v.Name, perSrc)
	a := limitStats(t, v.Name, agg)
	var full struct {
		Rules []struct {
			Rule  string `json:"rule"`
			Limit *struct {
				Sources uint64 `json:"sources"`
				Evicted uint64 `json:"evicted"`
			} `json:"limit"`
		} `json:"rules"`
	}
	s := cli(t, "stats", "--iface", v.Name, "--json")
	require.Equal(t, 0, s.code, s.stderr)
	require.NoError(t, json.Unmarshal([]byte(s.stdout), &full), s.stdout)
	var sources, evicted uint64
	for _, x := range full.Rules {
		if x.Rule == perSrc {
			sources, evicted = x.Limit.Sources, x.Limit.Evicted
		}
	}
	ac := cnt.get(t, aggSrc)
	aggSecs := float64(ac.Last-ac.First) / 1e9
	require.InDelta(t, float64(a.Limit.Conform.Packets), float64(ac.N), 10, "the aggregate's frames that passed were counted")
	rate := (float64(a.Limit.Conform.Packets) - 20000) / aggSecs
	t.Logf("spoofed: %d sources in %v, %d conformed, %d exceeded; %d buckets made, %d evicted; maps' memory %d bytes before, %d after; aggregate %.0f/s over %.1fs",
		runs*65536, spoofTook.Round(time.Millisecond), l.Limit.Conform.Packets, l.Limit.Exceed.Packets, sources, evicted, before, after, rate, aggSecs)
	require.Equal(t, before, after, "the maps' memory does not grow")
	require.GreaterOrEqual(t, sources, uint64(runs*65536), "a bucket for each source")
	require.GreaterOrEqual(t, evicted, uint64(runs*65536-(1<<18)), "the table (262,144 buckets) is full: the rest evicted")
	require.InEpsilon(t, 20000, rate, 0.10, "the aggregate limit holds through the flood")
}

package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// jsonBench is what the tests read of `xdpdrop bench --json`.
type jsonBench struct {
	Command string `json:"command"`
	Machine struct {
		CPUModel string `json:"cpu_model"`
		CPUs     int    `json:"cpus"`
		Kernel   string `json:"kernel"`
	} `json:"machine"`
	Settings struct {
		Repeat     int    `json:"repeat"`
		Generator  string `json:"generator"`
		Interfaces string `json:"interfaces"`
	} `json:"settings"`
	Notes   []string        `json:"notes"`
	Results []jsonBenchCase `json:"results"`
}

type jsonBenchCase struct {
	Table      string `json:"table"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	FrameBytes int    `json:"frame_bytes"`
	Mpps       struct {
		Median float64 `json:"median"`
	} `json:"mpps"`
	Samples []float64 `json:"samples_mpps"`
	Offered struct {
		Median float64 `json:"median"`
	} `json:"offered_mpps"`
	Sent      uint64 `json:"sent"`
	Received  uint64 `json:"received"`
	Forwarded uint64 `json:"forwarded"`
	Lost      []struct {
		Cause  string `json:"cause"`
		Frames uint64 `json:"frames"`
	} `json:"lost"`
	Unaccounted int64   `json:"unaccounted"`
	OtherCPU    float64 `json:"other_cpu_pct"`
	// Pointers: present or absent is what the tests check.
	GenIdle        *float64 `json:"generator_idle_pct"`
	GeneratorBound *bool    `json:"generator_bound"`
	Error          string   `json:"error"`
}

// requireSaneRow checks a row the way users read it: a rate, nothing
// received that was not sent, every frame received or lost by a named
// cause. Never the values themselves.
func requireSaneRow(t *testing.T, r jsonBenchCase, repeat int) {
	t.Helper()
	require.Empty(t, r.Error, r.Name)
	require.Len(t, r.Samples, repeat, r.Name)
	// No rate is acceptable only when the report says other work took the
	// CPUs (go test runs other packages' kernel tests alongside).
	for _, rate := range []float64{r.Mpps.Median, r.Offered.Median} {
		if rate == 0 {
			require.Greater(t, r.OtherCPU, 25.0, "%s measured no rate, yet other work took only %.0f%% of the CPUs", r.Name, r.OtherCPU)
		}
	}
	require.Positive(t, r.Received, r.Name)
	require.LessOrEqual(t, r.Received, r.Sent+16, "%s: received more than sent", r.Name)
	out := r.Received
	if r.Kind == "l2fwd" {
		require.LessOrEqual(t, r.Forwarded, r.Received+16, r.Name)
		out = r.Forwarded
	}
	var lost uint64
	for _, l := range r.Lost {
		require.NotEmpty(t, l.Cause)
		lost += l.Frames
	}
	require.Equal(t, int64(r.Sent), int64(out)+int64(lost)+r.Unaccounted, r.Name)
	require.LessOrEqual(t, r.Unaccounted, int64(16), r.Name)
	require.GreaterOrEqual(t, r.Unaccounted, int64(-16), r.Name)
	require.NotNil(t, r.GeneratorBound, "%s: generator_bound is always there", r.Name)
	if r.Kind == "txonly" {
		require.Nil(t, r.GenIdle, "%s: no generator, no generator idle share", r.Name)
		require.False(t, *r.GeneratorBound, r.Name)
	} else {
		require.NotNil(t, r.GenIdle, "%s: the generator's CPU idle share", r.Name)
		require.GreaterOrEqual(t, *r.GenIdle, 0.0, r.Name)
		require.LessOrEqual(t, *r.GenIdle, 100.0, r.Name)
	}
}

func TestCLIBenchUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--tables", "drop,nope"}, `unknown table "nope"`},
		{[]string{"bench", "--repeat", "0"}, "--repeat 0: want 1 to 1000"},
		{[]string{"bench", "--duration", "1ms"}, "--duration 1ms: want at least 10ms"},
		{[]string{"bench", "--rules", "lots"}, `--rules "lots": want numbers`},
		{[]string{"bench", "--sizes", "64,20"}, `--sizes "64,20": want numbers from 64 to 9004`},
		{[]string{"bench", "--cpus", "0,1,2"}, "want one or two CPUs"},
		{[]string{"bench", "--wait", "nap"}, `--wait "nap"`},
		{[]string{"bench", "--host", "veth0"}, "--host and --peer go together"},
		{[]string{"bench", "--peer-netns", "lab"}, "--peer-netns needs --host and --peer"},
		{[]string{"bench", "extra"}, `unknown command "extra"`},
		{[]string{"bench", "--xdpsock", "/nonexistent/xdpsock"}, `--xdpsock "/nonexistent/xdpsock": not an executable file`},
		{[]string{"bench", "--xdpsock", "/tmp"}, `--xdpsock "/tmp": not an executable file`},
		{[]string{"bench", "--tables", "xdpsock"}, "--tables xdpsock needs --xdpsock PATH"},
		{[]string{"bench", "--xdpsock", "/bin/true", "--host", "a", "--peer", "b"}, "--xdpsock runs on sandbox pairs only"},
		{[]string{"gen", "--iface", "x", "--engine", "dpdk"}, `--engine "dpdk": want live or xsk`},
		{[]string{"gen", "--iface", "x", "--engine", "xsk", "--flows", "4"}, "--flows 4: the xsk engine sends one frame template"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			requireOneLineError(t, cli(t, tc.args...), 2, tc.want)
		})
	}
}

// TestCLIBench runs every table of the standard plan briefly, as JSON, and
// the drop table as Markdown.
func TestCLIBench(t *testing.T) {
	testenv.RequireRoot(t)
	// Busy polling on one core needs a few hundred milliseconds to start.
	r := cli(t, "bench", "--warmup", "300ms", "--duration", "200ms", "--repeat", "1",
		"--rules", "1k", "--budgets", "64", "--quiet", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stderr, "--quiet")
	var rep jsonBench
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.True(t, strings.HasPrefix(rep.Command, "xdpdrop bench "), rep.Command)
	require.Contains(t, rep.Command, "--rules 1k")
	require.Positive(t, rep.Machine.CPUs)
	require.NotEmpty(t, rep.Machine.Kernel)
	require.Equal(t, 1, rep.Settings.Repeat)
	require.Contains(t, rep.Settings.Generator, "xdpdrop gen")
	require.Equal(t, "sandbox", rep.Settings.Interfaces)
	require.NotEmpty(t, rep.Notes)

	tables := map[string]int{}
	kinds := map[string]bool{}
	sizes := map[int]bool{}
	for _, row := range rep.Results {
		requireSaneRow(t, row, 1)
		tables[row.Table]++
		kinds[row.Kind] = true
		sizes[row.FrameBytes] = true
	}
	require.Equal(t, map[string]int{"drop": 4, "need_wakeup": 12, "busy_poll": 2, "frame_size": 6}, tables)
	require.Len(t, kinds, 7, "every kind: %v", kinds)
	require.Equal(t, map[int]bool{64: true, 1500: true}, sizes)

	r = cli(t, "bench", "--tables", "drop", "--rules", "1k", "--warmup", "100ms", "--duration", "200ms", "--repeat", "2")
	require.Equal(t, 0, r.code, r.stderr)
	out := r.stdout
	require.Contains(t, out, "Measured with `xdpdrop bench --duration 200ms --repeat 2 --rules 1k --tables drop --warmup 100ms` on ")
	require.Contains(t, out, "### Drop: frames dropped per second, by hook (64-byte frames)")
	require.Contains(t, out, "| | Mpps | range (spread) | offered Mpps | gen idle | sent | received | lost | other CPU |")
	for _, row := range []string{"TC drop (tcx ingress)", "XDP drop, generic mode", "XDP drop, native mode", "fast drop, 1k prefix rules"} {
		require.Contains(t, out, "| "+row+" | **", row)
	}
	require.NotContains(t, out, "failed:")
	require.Contains(t, r.stderr, "pass 2/2 [ 4/4] fastdrop 1k rules 64B", "progress on stderr")
}

// TestCLIBenchPair measures on a pair the user names.
func TestCLIBenchPair(t *testing.T) {
	v := sandboxForCLI(t)
	r := cli(t, "bench", "--host", v.Name, "--peer", v.PeerName, "--peer-netns", v.NSName,
		"--tables", "drop,frame_size", "--rules", "1k", "--sizes", "64", "--warmup", "100ms", "--duration", "200ms", "--repeat", "1", "--quiet", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep jsonBench
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Equal(t, v.Name+"/"+v.PeerName, rep.Settings.Interfaces)
	require.Len(t, rep.Results, 7)
	for _, row := range rep.Results {
		requireSaneRow(t, row, 1)
	}
	// The pair is still there, without programs.
	l, err := netlink.LinkByName(v.Name)
	require.NoError(t, err)
	require.False(t, l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached, "bench leaves no program behind")
}

// benchGenerator finds the `xdpdrop gen` process bench started, and the
// namespace and interface it sends from.
func benchGenerator(pid int) (child int, ns, iface string, ok bool) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(cmdline), "\x00")
		if len(args) < 2 || args[1] != "gen" {
			continue
		}
		for i := range args[:len(args)-1] {
			switch args[i] {
			case "--netns":
				ns = args[i+1]
			case "--iface":
				iface = args[i+1]
			}
		}
		return p, ns, iface, ns != "" && iface != ""
	}
	return 0, "", "", false
}

// TestCLIBenchInterrupt: Ctrl-C in the middle of a row prints the rows
// done, says so, and removes the row's sandbox and generator.
func TestCLIBenchInterrupt(t *testing.T) {
	testenv.RequireRoot(t)
	cmd := exec.Command(xdpdropBin, "bench", "--tables", "drop", "--rules", "1k", "--warmup", "100ms", "--duration", "30s")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	var child int
	var ns, iface string
	require.Eventually(t, func() bool {
		var ok bool
		child, ns, iface, ok = benchGenerator(cmd.Process.Pid)
		return ok
	}, 20*time.Second, 20*time.Millisecond, "bench never started its generator: %s", &errb)
	h, err := netns.GetFromName(ns)
	require.NoError(t, err, "the row's namespace exists while it runs")
	h.Close()

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 1, ee.ExitCode(), errb.String())
	require.Contains(t, errb.String(), "xdpdrop: bench: interrupted")

	_, err = netns.GetFromName(ns)
	require.Error(t, err, "namespace %s removed", ns)
	require.NoDirExists(t, filepath.Join("/proc", strconv.Itoa(child)), "generator %d stopped", child)
	_, err = netlink.LinkByName(strings.TrimSuffix(iface, "b") + "a")
	require.Error(t, err, "veth removed")
}

func TestCLIBenchNotRoot(t *testing.T) {
	testenv.RequireRoot(t) // to switch users
	r := cliAs(t, 65534, "bench", "--tables", "drop", "--quick")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "needs root")
	require.NotContains(t, r.stderr, "goroutine ")
	require.Empty(t, r.stdout)
}

// TestCLIGenXSK sends with the AF_XDP engine from the peer and counts at
// the other end: every frame gen says it sent arrived.
func TestCLIGenXSK(t *testing.T) {
	objs := loadCount(t, gen.BasicVerdictVERDICT_DROP)
	v := testenv.NewVeth(t, testenv.VethOptions{})
	l, err := link.AttachXDP(link.XDPOptions{Program: objs.XdpCount, Interface: v.Index, Flags: link.XDPDriverMode})
	require.NoError(t, err)
	defer l.Close()

	r := cli(t, "gen", "--netns", v.NSName, "--iface", v.PeerName, "--engine", "xsk", "--count", "20000", "--size", "100", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var sum struct {
		Engine string  `json:"engine"`
		Frames uint64  `json:"frames"`
		Size   int     `json:"frame_bytes"`
		PPS    float64 `json:"pps"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sum), r.stdout)
	require.Equal(t, "xsk", sum.Engine)
	require.Equal(t, 100, sum.Size)
	require.GreaterOrEqual(t, sum.Frames, uint64(20000), "--count is a lower bound")
	require.Positive(t, sum.PPS)

	var dropped uint64
	require.NoError(t, v.InPeerNS(func() error {
		pl, err := netlink.LinkByName(v.PeerName)
		if err == nil && pl.Attrs().Statistics != nil {
			dropped = pl.Attrs().Statistics.TxDropped
		}
		return err
	}))
	got := sumVerdict(t, objs.Verdicts, gen.BasicVerdictVERDICT_DROP)
	require.GreaterOrEqual(t, got.Packets+dropped, sum.Frames, "every frame sent arrived (or veth says it dropped it)")

	r = cli(t, "gen", "--netns", v.NSName, "--iface", v.PeerName, "--engine", "xsk", "--rate", "20000", "--duration", "300ms", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sum), r.stdout)
	require.Positive(t, sum.Frames)
	require.Less(t, sum.Frames, uint64(100_000), "--rate limits the xsk engine too")
}

package benchmark_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/xdpdrop/xdpdrop/benchmark"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
	"github.com/xdpdrop/xdpdrop/sandbox"
	"github.com/xdpdrop/xdpdrop/xsk"
)

// genEnv carries a generator job (JSON) to a child copy of the test
// binary, which runs it with the in-process generator until SIGINT: the
// same shape as `xdpdrop bench` running `xdpdrop gen`.
const genEnv = "XDPDROP_BENCHMARK_TEST_GENERATOR"

func TestMain(m *testing.M) {
	if f := os.Getenv(xdpsockEnv); f != "" {
		if err := childXDPSock(f, flagArgs()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	if job := os.Getenv(genEnv); job != "" {
		if err := childGenerator(job); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// flagArgs are the arguments after the test binary's own -test.* ones.
func flagArgs() []string {
	var out []string
	for _, a := range os.Args[1:] {
		if !strings.HasPrefix(a, "-test.") {
			out = append(out, a)
		}
	}
	return out
}

func childGenerator(spec string) error {
	if spec == "fail" {
		return fmt.Errorf("generator failed on purpose")
	}
	var job benchmark.GenJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := benchmark.InProcess().Start(job)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-r.Done():
	}
	return r.Stop()
}

// childGen is a Command generator running this test binary; fail makes
// the child exit with an error at once.
func childGen(t *testing.T, fail bool) benchmark.Generator {
	exe, err := os.Executable()
	require.NoError(t, err)
	return benchmark.Command("test child", func(job benchmark.GenJob) *exec.Cmd {
		spec := "fail"
		if !fail {
			b, err := json.Marshal(job)
			if err != nil {
				panic(err)
			}
			spec = string(b)
		}
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), genEnv+"="+spec)
		return cmd
	})
}

// quick are options for brief runs: one window of 150ms per case.
func quick(gen benchmark.Generator) benchmark.Options {
	o := benchmark.QuickOptions()
	o.Warmup, o.Duration, o.Repeat = 100*time.Millisecond, 150*time.Millisecond, 1
	o.Generator = gen
	return o
}

// sandboxes records the interfaces of every case, to check they are gone.
type sandboxes struct{ hosts, namespaces []string }

func (s *sandboxes) record(e benchmark.Event) {
	if e.Stage == "warmup" {
		s.hosts = append(s.hosts, e.Host)
		s.namespaces = append(s.namespaces, e.PeerNetNS)
	}
}

func (s *sandboxes) requireGone(t *testing.T) {
	t.Helper()
	require.NotEmpty(t, s.hosts)
	for _, h := range s.hosts {
		_, err := netlink.LinkByName(h)
		require.Error(t, err, "interface %s left behind", h)
	}
	for _, n := range s.namespaces {
		h, err := netns.GetFromName(n)
		if err == nil {
			h.Close()
		}
		require.Error(t, err, "namespace %s left behind", n)
	}
}

// requireNoChildren checks that no generator process outlived its case.
func requireNoChildren(t *testing.T) {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	require.NoError(t, err)
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err == nil {
			require.Empty(t, strings.TrimSpace(string(b)), "child processes left: %s", f)
		}
	}
}

// requireSane checks what users rely on, not the values: every repeat
// measured something, nothing was received that was not sent, and every
// frame sent is received or lost at a named place.
func requireSane(t *testing.T, r benchmark.Result, repeat int) {
	t.Helper()
	require.Empty(t, r.Error, r.Name)
	require.Len(t, r.Samples, repeat, r.Name)
	for _, s := range r.Samples {
		require.GreaterOrEqual(t, s, 0.0, r.Name)
	}
	requireRate(t, r, r.Mpps.Median)
	requireRate(t, r, r.OfferedMpps.Median)
	require.LessOrEqual(t, r.Mpps.Min, r.Mpps.Median)
	require.GreaterOrEqual(t, r.Mpps.Max, r.Mpps.Median)
	require.Positive(t, r.Sent, r.Name)
	require.Positive(t, r.Received, r.Name)
	// A few frames the ends' own stacks send may be counted too (IPv6
	// neighbour discovery on a pair that has IPv6; sandboxes have none).
	require.LessOrEqual(t, r.Received, r.Sent+16, "%s: received more than was sent", r.Name)
	out := r.Received
	if r.Kind == benchmark.L2Fwd {
		require.Positive(t, r.Forwarded, r.Name)
		require.LessOrEqual(t, r.Forwarded, r.Received+16, r.Name)
		out = r.Forwarded
	}
	require.Equal(t, int64(r.Sent), int64(out)+int64(r.LostTotal())+r.Unaccounted, r.Name)
	// Counted from the start of the traffic to the end, after the rings
	// drained: nothing is left unexplained but a few stray frames.
	require.LessOrEqual(t, abs(r.Unaccounted), int64(16), "%s: frames unaccounted for: %+v", r.Name, r)
	for _, l := range r.Lost {
		require.Positive(t, l.Frames, r.Name)
		require.Equal(t, l.Cause.Describe(), l.Where)
	}
}

// requireRate: a row measured a rate, unless the report itself says that
// other work took the CPUs (go test runs other packages' kernel tests
// alongside; a starved window of a tenth of a second can see nothing).
func requireRate(t *testing.T, r benchmark.Result, mpps float64) {
	t.Helper()
	if mpps == 0 {
		require.Greater(t, r.OtherCPUPct, 25.0, "%s measured no rate, yet other work took only %.0f%% of the CPUs", r.Name, r.OtherCPUPct)
		return
	}
	require.Positive(t, mpps, r.Name)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestRunEveryKind measures every kind briefly in its own sandbox: drop
// kinds with the in-process generator, AF_XDP kinds with the generator in
// a child process (as xdpdrop bench does), both placements, busy polling
// and a large frame.
func TestRunEveryKind(t *testing.T) {
	testenv.RequireRoot(t)
	var boxes sandboxes
	run := func(gen benchmark.Generator, cases []benchmark.Case) *benchmark.Report {
		o := quick(gen)
		// Busy polling on one core takes a few hundred milliseconds to
		// get going (under -race), and a kernel thread on a busy CPU
		// (threaded NAPI) may wait a while for it.
		o.Warmup, o.Duration = 300*time.Millisecond, 300*time.Millisecond
		o.Progress = boxes.record
		rep, err := benchmark.Run(context.Background(), cases, o)
		require.NoError(t, err)
		require.Len(t, rep.Results, len(cases))
		for _, r := range rep.Results {
			requireSane(t, r, o.Repeat)
		}
		return rep
	}
	rep := run(benchmark.InProcess(), []benchmark.Case{
		{Table: "t", Kind: benchmark.DropTC, FrameSize: 64},
		{Table: "t", Kind: benchmark.DropGeneric, FrameSize: 64},
		{Table: "t", Kind: benchmark.DropNative, FrameSize: 64},
		{Table: "t", Kind: benchmark.DropFast, FrameSize: 64, Rules: 1000},
	})
	require.Equal(t, benchmark.DescribeMachine(), rep.Machine)
	require.NotEmpty(t, rep.Notes)
	require.Equal(t, "sandbox", rep.Settings.Interfaces)

	run(childGen(t, false), []benchmark.Case{
		{Table: "t", Kind: benchmark.RxDrop, FrameSize: 64, Placement: benchmark.TwoCores},
		{Table: "t", Kind: benchmark.RxDrop, FrameSize: 64, Placement: benchmark.OneCore, NeedWakeup: true, BusyPollBudget: 64},
		{Table: "t", Kind: benchmark.TxOnly, FrameSize: 64, Placement: benchmark.OneCore, NeedWakeup: true},
		{Table: "t", Kind: benchmark.TxOnly, FrameSize: 64, Placement: benchmark.TwoCores},
		{Table: "t", Kind: benchmark.L2Fwd, FrameSize: 1500, Placement: benchmark.TwoCores, NeedWakeup: true},
	})
	boxes.requireGone(t)
	requireNoChildren(t)
}

// TestRunSharedRows: a row listed in two tables is measured once and
// reported in both.
func TestRunSharedRows(t *testing.T) {
	testenv.RequireRoot(t)
	c := benchmark.Case{Table: "a", Kind: benchmark.DropNative, FrameSize: 64}
	d := c
	d.Table = "b"
	setups := 0
	o := quick(benchmark.InProcess())
	o.Repeat = 2
	o.Progress = func(e benchmark.Event) {
		if e.Stage == "setup" {
			setups++
		}
	}
	rep, err := benchmark.Run(context.Background(), []benchmark.Case{c, d}, o)
	require.NoError(t, err)
	require.Equal(t, o.Repeat, setups, "one setup per pass")
	require.Len(t, rep.Results, 2)
	require.Equal(t, "a", rep.Results[0].Table)
	require.Equal(t, "b", rep.Results[1].Table)
	require.Equal(t, rep.Results[0].Samples, rep.Results[1].Samples)
}

// TestRunOnPair measures on a pair the caller made: the cases work there
// and leave the pair as they found it (no programs, GRO as it was).
func TestRunOnPair(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	o := quick(childGen(t, false))
	o.Pair = &benchmark.Pair{Host: v.Name, Peer: v.PeerName, PeerNetNS: v.NSName}
	rep, err := benchmark.Run(context.Background(), []benchmark.Case{
		{Table: "t", Kind: benchmark.DropGeneric, FrameSize: 64},
		{Table: "t", Kind: benchmark.L2Fwd, FrameSize: 64, Placement: benchmark.TwoCores, NeedWakeup: true},
	}, o)
	require.NoError(t, err)
	require.Equal(t, v.Name+"/"+v.PeerName, rep.Settings.Interfaces)
	for _, r := range rep.Results {
		requireSane(t, r, o.Repeat)
	}
	st, err := loader.Status(v.Name, testenv.TempPinDir(t))
	require.NoError(t, err)
	require.Empty(t, st[0].Programs)
	require.NoError(t, v.InPeerNS(func() error {
		st, err := loader.Status(v.PeerName, testenv.TempPinDir(t))
		if err == nil && len(st[0].Programs) > 0 {
			err = fmt.Errorf("programs left on the peer: %+v", st[0].Programs)
		}
		return err
	}))
	gro, err := sandbox.GRO(v.Name)
	require.NoError(t, err)
	require.False(t, gro, "GRO restored")
	requireNoChildren(t)

	o.Pair = &benchmark.Pair{Host: v.Name, Peer: "xdnosuch0", PeerNetNS: v.NSName}
	rep, err = benchmark.Run(context.Background(), []benchmark.Case{{Table: "t", Kind: benchmark.DropNative, FrameSize: 64}}, o)
	require.NoError(t, err)
	require.Contains(t, rep.Results[0].Error, `interface "xdnosuch0"`)
}

// TestRunCancel interrupts a run in the middle of a case: Run returns the
// rows done, with the context's error, and removes what the case made,
// generator included.
func TestRunCancel(t *testing.T) {
	testenv.RequireRoot(t)
	var boxes sandboxes
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := quick(childGen(t, false))
	cases := []benchmark.Case{
		{Table: "t", Kind: benchmark.DropNative, FrameSize: 64},
		{Table: "t", Kind: benchmark.RxDrop, FrameSize: 64, Placement: benchmark.TwoCores},
	}
	o.Progress = func(e benchmark.Event) {
		boxes.record(e)
		if e.Index == 1 && e.Stage == "warmup" {
			cancel() // while the second case runs
		}
	}
	start := time.Now()
	rep, err := benchmark.Run(ctx, cases, o)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 20*time.Second)
	require.Len(t, rep.Results, 1)
	require.Len(t, boxes.hosts, 2)
	boxes.requireGone(t)
	requireNoChildren(t)
}

// TestRunGeneratorFails: a generator that dies fails its case with its
// own words, and the run goes on.
func TestRunGeneratorFails(t *testing.T) {
	testenv.RequireRoot(t)
	var boxes sandboxes
	o := quick(childGen(t, true))
	o.Progress = boxes.record
	rep, err := benchmark.Run(context.Background(), []benchmark.Case{
		{Table: "t", Kind: benchmark.DropNative, FrameSize: 64},
		{Table: "t", Kind: benchmark.TxOnly, FrameSize: 64, Placement: benchmark.OneCore},
	}, o)
	require.NoError(t, err)
	require.Contains(t, rep.Results[0].Error, "generator failed on purpose")
	require.Zero(t, rep.Results[0].Mpps.Median)
	requireSane(t, rep.Results[1], o.Repeat) // txonly needs no generator
	boxes.requireGone(t)
	requireNoChildren(t)
}

func TestOptionsRefused(t *testing.T) {
	c := []benchmark.Case{{Table: "t", Kind: benchmark.DropNative, FrameSize: 64}}
	for _, tc := range []struct {
		o    benchmark.Options
		want string
	}{
		{benchmark.Options{Duration: time.Millisecond}, "want at least 10ms"},
		{benchmark.Options{Repeat: -1}, "repeat -1"},
		{benchmark.Options{CPUs: []int{0, 0}}, "two different CPUs"},
		{benchmark.Options{CPUs: []int{4096}}, "CPU 4096"},
		{benchmark.Options{CPUs: []int{0, 1, 2}}, "one or two"},
		{benchmark.Options{Batch: 9999}, "batch 9999"},
	} {
		_, err := benchmark.Run(context.Background(), c, tc.o)
		require.ErrorContains(t, err, tc.want)
	}
	_, err := benchmark.Run(context.Background(), []benchmark.Case{{Kind: benchmark.RxDrop, FrameSize: 64}}, benchmark.Options{})
	require.ErrorContains(t, err, "placement")
}

// xdpsockEnv makes a child copy of the test binary stand in for xdpsock
// (see fakeXDPSock); its value is the file to record the arguments in.
const xdpsockEnv = "XDPDROP_BENCHMARK_TEST_XDPSOCK"

// fakeXDPSock writes a shell script that stands in for xdpsock: it runs
// this test binary as a child that records its arguments, attaches the
// redirect program to the -i interface, receives and drops on a socket of
// package xsk, and prints what it received and lost in xdpsock's format
// (with thousands separators in the last block, as in a locale with
// grouping) until SIGINT, then exits 0 as xdpsock does.
func fakeXDPSock(t *testing.T) (path, argsFile string) {
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	path, argsFile = filepath.Join(dir, "xdpsock"), filepath.Join(dir, "args")
	script := "#!/bin/sh\nexec env " + xdpsockEnv + "=" + argsFile + " " + exe + " -test.run=^$ \"$@\"\n"
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path, argsFile
}

// childXDPSock is the child that fakeXDPSock runs.
func childXDPSock(argsFile string, args []string) error {
	if err := os.WriteFile(argsFile, []byte(strings.Join(args, " ")), 0o644); err != nil {
		return err
	}
	iface := ""
	for i, a := range args {
		if a == "-i" && i+1 < len(args) {
			iface = args[i+1]
		}
	}
	red, err := xsk.NewRedirect(xsk.RedirectOptions{Queues: []int{0}})
	if err != nil {
		return err
	}
	defer red.Close()
	att, err := loader.Attach(red.Program(), loader.Options{Interface: iface, Mode: loader.ModeDriver})
	if err != nil {
		return err
	}
	defer att.Close()
	s, err := xsk.Open(xsk.Options{Interface: iface, Bind: xsk.BindCopy})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := red.Register(s); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- xsk.RxDrop(ctx, s, xsk.ModeOptions{}) }()
	grouped := func(n uint64) string {
		d := strconv.FormatUint(n, 10)
		for i := len(d) - 3; i > 0; i -= 3 {
			d = d[:i] + "," + d[i:]
		}
		return d
	}
	block := func(num func(uint64) string) error {
		st, err := s.Stats()
		if err != nil {
			return err
		}
		fmt.Printf("\n sock0@%s:0 rxdrop xdp-drv \n%-18s %-14s %-14s %-14.2f\n", iface, "", "pps", "pkts", 1.0)
		for _, l := range []struct {
			label string
			n     uint64
		}{{"rx", st.RxFrames}, {"tx", 0}, {"rx dropped", st.Kernel.RxDropped}, {"rx invalid", 0}, {"tx invalid", 0},
			{"rx queue full", st.Kernel.RxRingFull}, {"fill ring empty", st.Kernel.RxFillRingEmptyDescs}, {"tx ring empty", 0}} {
			fmt.Printf("%-18s %-14s %-14s\n", l.label, "0", num(l.n))
		}
		fmt.Printf("\n%-18s %-14s %-14s\n", "", "calls/s", "count")
		fmt.Printf("%-18s %-14s %-14s\n", "rx empty polls", "0", num(st.RxWakeups+st.Polls))
		return nil
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return block(grouped)
		case <-tick.C:
			if err := block(func(n uint64) string { return strconv.FormatUint(n, 10) }); err != nil {
				return err
			}
		}
	}
}

// TestRunXDPSock runs an xdpsock row with a fake xdpsock: it gets the
// arguments of the row, on the row's pair, and what it prints is the
// row's (received, losses, system calls); the process is stopped and
// nothing is left behind.
func TestRunXDPSock(t *testing.T) {
	testenv.RequireRoot(t)
	path, argsFile := fakeXDPSock(t)
	var boxes sandboxes
	o := quick(childGen(t, false))
	o.Progress = boxes.record
	o.XDPSock = path
	c := benchmark.Case{Table: benchmark.TableXDPSock, Kind: benchmark.RxDrop, FrameSize: 64, Placement: benchmark.OneCore,
		NeedWakeup: true, App: benchmark.AppXDPSock}
	rep, err := benchmark.Run(context.Background(), []benchmark.Case{c}, o)
	require.NoError(t, err)
	require.Len(t, rep.Results, 1)
	r := rep.Results[0]
	require.Empty(t, r.Error)
	require.Equal(t, path, rep.Settings.XDPSock)
	require.Equal(t, "rxdrop 64B one-core need_wakeup=on xdpsock", r.Name)

	args, err := os.ReadFile(argsFile)
	require.NoError(t, err)
	require.Equal(t, "-i "+boxes.hosts[0]+" -q 0 -N -c -b 64 -x -a -r", strings.TrimSpace(string(args)))

	// The fake receives for real: the row balances like any other, with
	// the losses xdpsock reported, and its own count agrees with veth's.
	requireSane(t, r, o.Repeat)
	require.Positive(t, r.AppReceived, "xdpsock's own count of what it received")
	require.InDelta(t, float64(r.Received), float64(r.AppReceived), 16, "xdpsock's count against veth's")
	boxes.requireGone(t)
	requireNoChildren(t)

	// Without the binary, or on a pair of the caller's, such a row is
	// refused before anything is made.
	o.Pair = &benchmark.Pair{Host: "a", Peer: "b"}
	_, err = benchmark.Run(context.Background(), []benchmark.Case{c}, o)
	require.ErrorContains(t, err, "xdpsock rows run on sandbox pairs only")
	o.Pair = nil
	o.XDPSock = filepath.Join(t.TempDir(), "nothing")
	_, err = benchmark.Run(context.Background(), []benchmark.Case{c}, o)
	require.ErrorContains(t, err, "xdpsock binary")
}

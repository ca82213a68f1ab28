package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/xdpdrop/xdpdrop/benchmark"
	"github.com/xdpdrop/xdpdrop/xsk"
)

type benchFlags struct {
	tables, rules, sizes, budgets, cpus string
	quick                               bool
	warmup, duration                    time.Duration
	repeat                              int
	flows                               uint32
	wait                                string
	batch                               int
	host, peer, peerNetns               string
	xdpsock                             string
	inProcess                           bool
	jsonOut, quiet                      bool
}

// benchJSON is the JSON shape of `xdpdrop bench --json`: the command that
// made the report, and the report (see package benchmark for the fields).
type benchJSON struct {
	Command string `json:"command"`
	*benchmark.Report
}

func (a *app) benchCmd() *cobra.Command {
	f := &benchFlags{}
	d := benchmark.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "bench [--quick] [--tables drop,need_wakeup,busy_poll,frame_size] [--json]",
		Short: "Measure the classic XDP and AF_XDP figures on this machine, on veth pairs it makes",
		Long: `bench reproduces, on this machine, the measurements that the XDP and AF_XDP
kernel patch series published, and prints them as Markdown tables (or JSON):

  drop         frames dropped per second by a TC program (tcx ingress), by
               XDP in generic mode and in native mode, and by fast drop with
               10k and 1M prefix rules
  need_wakeup  AF_XDP rxdrop, txonly and l2fwd, with the application on the
               core that does the kernel's receive work or on another one,
               with need_wakeup off and on
  busy_poll    AF_XDP rxdrop on one core, preferred busy polling off and
               with budgets 64, 256 and 512
  frame_size   rxdrop, txonly and l2fwd with 64 and 1500-byte frames
  xdpsock      with --xdpsock PATH only: rxdrop and l2fwd on one core and
               on two, by package xsk (Go) and by the xdpsock binary at
               PATH (the kernel's AF_XDP sample in C, from bpf-examples,
               which you build: none comes with this tool), side by side on the
               same pair, its figures parsed from its output (-x -a)

Every row runs on a veth pair of its own, with one end in a new network
namespace, removed when the row ends (also on Ctrl-C); --host and --peer
measure on an existing pair instead. Traffic comes from 'xdpdrop gen' (XDP
live frames) in a process of its own, pinned to the first of --cpus. A
pass sets each row up, warms it up for --warmup, measures it for
--duration and removes it; --repeat passes run one after the other, so
that other work on the machine disturbs one repeat of several rows rather
than every repeat of one. A row gives the median rate with its range and
spread, the rate offered to it, the share of the generator's CPU that sat
idle (the generator slept while it could have sent), a mark (†) on rows
that took everything the generator offered (generator-bound: what they
measure could go faster), and every frame sent, received and lost, by
cause (the veth ring, XDP_STATISTICS, the programs' counters), counted from
the start of the traffic to its end.

Frame sizes count the 4-byte FCS, as the kernel's xdpsock does: 64 sends
60-byte frames. The defaults take a few minutes; --quick takes about one.
On a machine with few CPUs the generator, the kernel and the application
share them: the report says so, and its figures are this machine's, not the
hardware's (see docs/BENCHMARKS.md).`,
		Example: `  xdpdrop bench
  xdpdrop bench --quick
  xdpdrop bench --tables drop --rules 10k,100k,1M --repeat 5
  xdpdrop bench --tables need_wakeup,busy_poll --duration 5s --json > afxdp.json
  xdpdrop bench --host veth0 --peer veth1 --peer-netns lab --tables drop
  xdpdrop bench --tables need_wakeup --xdpsock ~/bpf-examples/AF_XDP-example/xdpsock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.bench(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.tables, "tables", strings.Join(benchmark.Tables(), ","), "tables to measure, comma-separated")
	fl.BoolVar(&f.quick, "quick", false, "a fast look: warm-up 500ms, one repeat of 500ms per row (explicit --warmup, --duration, --repeat win)")
	fl.DurationVar(&f.warmup, "warmup", d.Warmup, "warm-up of a row before each measured window")
	fl.DurationVar(&f.duration, "duration", d.Duration, "length of each measured window")
	fl.IntVar(&f.repeat, "repeat", d.Repeat, "passes over the rows: measured windows per row")
	fl.StringVar(&f.rules, "rules", "10k,1M", "fast-drop rule-set sizes of the drop table")
	fl.StringVar(&f.sizes, "sizes", "64,1500", "frame sizes (with FCS) of the frame_size table; the first is used everywhere else")
	fl.StringVar(&f.budgets, "budgets", "64,256,512", "busy-poll budgets of the busy_poll table")
	fl.StringVar(&f.cpus, "cpus", "0,1", "CPU of the generator and the kernel's receive work, and the other CPU of two-core rows")
	fl.Uint32Var(&f.flows, "flows", d.Flows, "vary source address and port of the traffic over this many flows")
	fl.StringVar(&f.wait, "wait", "spin", "how AF_XDP loops wait for frames: spin (as xdpsock), adaptive, block or poll")
	fl.IntVar(&f.batch, "batch", d.Batch, "AF_XDP batch size, 1 to 512")
	fl.StringVar(&f.host, "host", "", "measure on this existing interface instead of a sandbox (needs --peer)")
	fl.StringVar(&f.peer, "peer", "", "the other end of --host: traffic is sent from it")
	fl.StringVar(&f.peerNetns, "peer-netns", "", "named network namespace (ip netns) of --peer")
	fl.StringVar(&f.xdpsock, "xdpsock", "", "also run the xdpsock table with the xdpsock binary at this path (Go against C)")
	fl.BoolVar(&f.inProcess, "in-process-generator", false, "run the generator inside this process (costs AF_XDP rows much of their rate)")
	fl.BoolVar(&f.jsonOut, "json", false, "print the report as JSON")
	fl.BoolVar(&f.quiet, "quiet", false, "no progress on stderr")
	return cmd
}

func (a *app) bench(cmd *cobra.Command, f *benchFlags) error {
	opts, plan, err := f.options(cmd.Flags())
	if err != nil {
		return err
	}
	cases, err := benchmark.Plan(plan)
	if err != nil {
		return usagef("%v", strings.TrimPrefix(err.Error(), "benchmark: "))
	}
	if f.inProcess {
		opts.Generator = benchmark.InProcess()
	} else {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this program to run its generator: %w", err)
		}
		opts.Generator = genProcess(exe)
	}
	if !f.quiet {
		opts.Progress = progressPrinter(a.stderr, opts.Repeat)
	}
	command := commandLine(cmd)
	rep, err := benchmark.Run(cmd.Context(), cases, opts)
	var werr error
	if rep != nil && len(rep.Results) > 0 {
		if f.jsonOut {
			werr = writeJSON(a.stdout, benchJSON{Command: command, Report: rep})
		} else {
			werr = writeBenchMarkdown(a.stdout, command, rep)
		}
	}
	switch {
	case errors.Is(err, context.Canceled) && rep != nil && len(rep.Results) > 0:
		return errors.New("bench: interrupted; the rows measured so far are printed above, and everything the run made is removed")
	case errors.Is(err, context.Canceled):
		return errors.New("bench: interrupted; everything the run made is removed")
	case err != nil:
		return err
	}
	return werr
}

// options turns the flags into benchmark options and a plan.
func (f *benchFlags) options(fl *pflag.FlagSet) (benchmark.Options, benchmark.PlanOptions, error) {
	opts := benchmark.DefaultOptions()
	if f.quick {
		opts = benchmark.QuickOptions()
	}
	if fl.Changed("warmup") || !f.quick {
		opts.Warmup = f.warmup
	}
	if fl.Changed("duration") || !f.quick {
		opts.Duration = f.duration
	}
	if fl.Changed("repeat") || !f.quick {
		opts.Repeat = f.repeat
	}
	var plan benchmark.PlanOptions
	var err error
	switch {
	case opts.Warmup < 0:
		return opts, plan, usagef("--warmup %s: must not be negative", opts.Warmup)
	case opts.Duration < 10*time.Millisecond:
		return opts, plan, usagef("--duration %s: want at least 10ms", opts.Duration)
	case opts.Repeat < 1 || opts.Repeat > 1000:
		return opts, plan, usagef("--repeat %d: want 1 to 1000", opts.Repeat)
	case f.flows < 1 || f.flows > 65536:
		return opts, plan, usagef("--flows %d: want 1 to 65536", f.flows)
	case f.batch < 1 || f.batch > xsk.MaxBatch:
		return opts, plan, usagef("--batch %d: want 1 to %d", f.batch, xsk.MaxBatch)
	case (f.host == "") != (f.peer == ""):
		return opts, plan, usagef("--host and --peer go together: name both ends of the pair, or neither for a sandbox")
	case f.peerNetns != "" && f.peer == "":
		return opts, plan, usagef("--peer-netns needs --host and --peer")
	}
	opts.Flows, opts.Batch = f.flows, f.batch
	if opts.Wait, err = xsk.ParseWaitMode(f.wait); err != nil {
		return opts, plan, usagef("--wait %q: want spin, adaptive, block or poll", f.wait)
	}
	if opts.CPUs, err = intList("--cpus", f.cpus, 0, 1023); err != nil {
		return opts, plan, err
	}
	if len(opts.CPUs) < 1 || len(opts.CPUs) > 2 {
		return opts, plan, usagef("--cpus %q: want one or two CPUs, like 0,1", f.cpus)
	}
	if f.host != "" {
		opts.Pair = &benchmark.Pair{Host: f.host, Peer: f.peer, PeerNetNS: f.peerNetns}
	}
	if f.xdpsock != "" {
		fi, err := os.Stat(f.xdpsock)
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return opts, plan, usagef("--xdpsock %q: not an executable file (build xdpsock from bpf-examples' AF_XDP-example)", f.xdpsock)
		}
		if f.host != "" {
			return opts, plan, usagef("--xdpsock runs on sandbox pairs only: drop --host and --peer (xdpsock leaves its program attached when it has to be killed)")
		}
		opts.XDPSock, plan.XDPSock = f.xdpsock, true
	}
	for _, t := range strings.Split(f.tables, ",") {
		if t = strings.TrimSpace(t); t != "" {
			plan.Tables = append(plan.Tables, t)
		}
	}
	if plan.Rules, err = intList("--rules", f.rules, 1, 16_000_000); err != nil {
		return opts, plan, err
	}
	if plan.Sizes, err = intList("--sizes", f.sizes, benchmark.MinFrameSize, benchmark.MaxFrameSize); err != nil {
		return opts, plan, err
	}
	if plan.Budgets, err = intList("--budgets", f.budgets, 1, 65535); err != nil {
		return opts, plan, err
	}
	if f.xdpsock == "" && slices.Contains(plan.Tables, benchmark.TableXDPSock) {
		return opts, plan, usagef("--tables %s needs --xdpsock PATH: the xdpsock binary to run", benchmark.TableXDPSock)
	}
	return opts, plan, nil
}

// intList parses "10k,1M,500" within [lo, hi].
func intList(flag, s string, lo, hi int) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		mult := 1
		switch {
		case strings.HasSuffix(part, "k"):
			mult, part = 1000, strings.TrimSuffix(part, "k")
		case strings.HasSuffix(part, "M"):
			mult, part = 1_000_000, strings.TrimSuffix(part, "M")
		}
		n, err := strconv.Atoi(part)
		if err != nil || n*mult < lo || n*mult > hi {
			return nil, usagef("%s %q: want numbers from %d to %d, comma-separated (k and M allowed)", flag, s, lo, hi)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

// genProcess runs `xdpdrop gen` in a process of its own for every row.
func genProcess(exe string) benchmark.Generator {
	return benchmark.Command("xdpdrop gen (XDP live frames) in a process of its own", func(job benchmark.GenJob) *exec.Cmd {
		args := []string{"gen", "--iface", job.Interface,
			"--size", strconv.Itoa(len(job.Frame)),
			"--src", job.Src.String(), "--dst", job.Dst.String(),
			"--sport", strconv.Itoa(int(job.SrcPort)), "--dport", strconv.Itoa(int(job.DstPort)),
			"--src-mac", job.SrcMAC.String(), "--dst-mac", job.DstMAC.String(),
			"--flows", strconv.Itoa(int(job.Flows)), "--batch", strconv.Itoa(int(job.Batch)),
			"--quiet", "--json"}
		if job.NetNS != "" {
			args = append(args, "--netns", job.NetNS)
		}
		return exec.Command(exe, args...)
	})
}

// commandLine is the command as typed, in a canonical order: the flags
// that were set.
func commandLine(cmd *cobra.Command) string {
	parts := []string{cmd.CommandPath()}
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if fl.Value.Type() == "bool" {
			parts = append(parts, "--"+fl.Name)
			return
		}
		parts = append(parts, "--"+fl.Name+" "+fl.Value.String())
	})
	return strings.Join(parts, " ")
}

// progressPrinter shows a line on w for every window measured, and the
// rows that failed.
func progressPrinter(w io.Writer, passes int) func(benchmark.Event) {
	var started time.Time
	open := false
	return func(e benchmark.Event) {
		switch e.Stage {
		case "setup":
			started, open = time.Now(), true
			fmt.Fprintf(w, "pass %d/%d [%2d/%d] %-52s", e.Repeat+1, passes, e.Index+1, e.Total, e.Case.Name())
		case "repeat":
			fmt.Fprintf(w, " %6.2f Mpps (%.1fs)\n", e.Mpps, time.Since(started).Seconds())
			open = false
		case "done":
			if e.Result.Error == "" {
				return
			}
			if !open {
				fmt.Fprintf(w, "%13s%-52s", fmt.Sprintf("[%2d/%d] ", e.Index+1, e.Total), e.Case.Name())
			}
			fmt.Fprintf(w, " failed: %s\n", e.Result.Error)
			open = false
		}
	}
}

// writeBenchMarkdown prints the report as Markdown: a preamble that says
// how and where it was measured, then one table per plan table.
func writeBenchMarkdown(w io.Writer, command string, rep *benchmark.Report) error {
	s := rep.Settings
	fmt.Fprintf(w, "Measured with `%s` on %s, %s, %s UTC; %.0fs in all; load average %.2f at the start, %.2f at the end.\n\n",
		command, rep.Machine, rep.Machine.GoVersion, rep.Started.Format("2006-01-02 15:04"), rep.Seconds, rep.LoadAvg, rep.LoadAvgEnd)
	where := "a fresh veth pair per row (one end in its own network namespace)"
	if s.Interfaces != "sandbox" {
		where = "the interfaces " + s.Interfaces
	}
	fmt.Fprintf(w, "Each row: %d passes over all rows, each with a warm-up of %s and a window of %s; Mpps is the median of the windows, with their range and spread "+
		"(max−min)/median. Traffic: %s, on CPU %d; %d flow(s). AF_XDP: copy mode where the driver has no zero-copy (veth), "+
		"wait %s, batch %d. Interfaces: %s.\n\n",
		s.Repeat, secs(s.WarmupSeconds), secs(s.DurationSeconds), s.Generator, s.CPUs[0], s.Flows, s.Wait, s.Batch, where)
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Columns: **Mpps** what the row measures (frames dropped; received by the socket for rxdrop; arrived at the other end for "+
		"txonly and l2fwd); **offered** the rate offered to it (the generator's frames into the receiving ring; the socket's sends for txonly); "+
		"**gen idle** the share of the generator's CPU's time that nothing ran on it (the generator slept waiting for the kernel while it could have sent); "+
		"rows marked † took everything the generator offered: they are generator-bound, and what they measure could go faster; "+
		"**syscalls/frame** the AF_XDP socket's system calls per frame (what need_wakeup and busy polling change); "+
		"**sent / received** every frame from the start of the traffic to its end, warm-up included (l2fwd: received → sent back and arrived); "+
		"**lost** where the others went; **other CPU** the share of the machine's CPU time that other work took in the worst window "+
		"(more than a few percent disturbs the row).")

	var order []string
	byTable := map[string][]benchmark.Result{}
	for _, r := range rep.Results {
		if _, ok := byTable[r.Table]; !ok {
			order = append(order, r.Table)
		}
		byTable[r.Table] = append(byTable[r.Table], r)
	}
	for _, t := range order {
		rows := byTable[t]
		afxdp := false
		for _, r := range rows {
			afxdp = afxdp || r.Kind.IsAFXDP()
		}
		fmt.Fprintf(w, "\n### %s\n\n", tableTitle(t, rows))
		if afxdp {
			fmt.Fprintln(w, "| | Mpps | range (spread) | offered Mpps | gen idle | syscalls/frame | sent | received | lost | other CPU |")
			fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|---|--:|")
		} else {
			fmt.Fprintln(w, "| | Mpps | range (spread) | offered Mpps | gen idle | sent | received | lost | other CPU |")
			fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|---|--:|")
		}
		for _, r := range rows {
			label := rowLabel(r)
			if r.Error != "" {
				gap := "| | | | | |"
				if afxdp {
					gap = "| | | | | | |"
				}
				fmt.Fprintf(w, "| %s | — %s failed: %s | |\n", label, gap, mdEscape(r.Error))
				continue
			}
			offered := "—"
			if r.OfferedMpps.Median > 0 {
				offered = fmt.Sprintf("%.2f", r.OfferedMpps.Median)
			}
			idle := "—"
			if r.GeneratorIdlePct != nil {
				idle = fmt.Sprintf("%.0f%%", *r.GeneratorIdlePct)
			}
			mark := ""
			if r.GeneratorBound {
				mark = " †"
			}
			sent := "—"
			if r.Sent > 0 {
				sent = count(r.Sent)
			}
			recv := count(r.Received)
			if r.App == benchmark.AppXDPSock {
				recv += fmt.Sprintf(" (xdpsock says %s)", count(r.AppReceived))
			}
			if r.Kind == benchmark.L2Fwd {
				recv += " → " + count(r.Forwarded)
			}
			sys := ""
			if afxdp {
				sys = " — |"
				if r.Kind.IsAFXDP() {
					sys = fmt.Sprintf(" %.3f |", r.SyscallsPerFrame)
				}
			}
			fmt.Fprintf(w, "| %s | **%.2f**%s | %.2f–%.2f (%.0f%%) | %s | %s |%s %s | %s | %s | %.0f%% |\n",
				label, r.Mpps.Median, mark, r.Mpps.Min, r.Mpps.Max, r.Mpps.SpreadPct, offered, idle, sys, sent, recv, lossText(r), r.OtherCPUPct)
		}
	}
	_, err := fmt.Fprintln(w)
	return err
}

func tableTitle(t string, rows []benchmark.Result) string {
	size := rows[0].FrameSize
	switch t {
	case benchmark.TableDrop:
		return fmt.Sprintf("Drop: frames dropped per second, by hook (%d-byte frames)", size)
	case benchmark.TableNeedWakeup:
		return fmt.Sprintf("AF_XDP need_wakeup: rxdrop, txonly, l2fwd on one core and on two (%d-byte frames)", size)
	case benchmark.TableBusyPoll:
		return fmt.Sprintf("AF_XDP preferred busy polling: rxdrop on one core (%d-byte frames)", size)
	case benchmark.TableFrameSize:
		return "AF_XDP frame size: rxdrop, txonly, l2fwd on two cores, need_wakeup on"
	case benchmark.TableXDPSock:
		return fmt.Sprintf("AF_XDP against xdpsock: package xsk (Go) and xdpsock (C) side by side, need_wakeup on (%d-byte frames)", size)
	}
	return t
}

func rowLabel(r benchmark.Result) string {
	nw := "need_wakeup " + map[bool]string{false: "off", true: "on"}[r.NeedWakeup]
	place := map[benchmark.Placement]string{benchmark.OneCore: "one core", benchmark.TwoCores: "two cores"}[r.Placement]
	switch r.Table {
	case benchmark.TableDrop:
		switch r.Kind {
		case benchmark.DropTC:
			return "TC drop (tcx ingress)"
		case benchmark.DropGeneric:
			return "XDP drop, generic mode"
		case benchmark.DropNative:
			return "XDP drop, native mode"
		case benchmark.DropFast:
			return fmt.Sprintf("fast drop, %s prefix rules", benchmark.CountName(r.Rules))
		}
	case benchmark.TableNeedWakeup:
		return fmt.Sprintf("%s, %s, %s", r.Kind, place, nw)
	case benchmark.TableBusyPoll:
		if r.BusyPollBudget == 0 {
			return "busy polling off"
		}
		return fmt.Sprintf("busy polling, budget %d", r.BusyPollBudget)
	case benchmark.TableFrameSize:
		return fmt.Sprintf("%s, %d B", r.Kind, r.FrameSize)
	case benchmark.TableXDPSock:
		app := "xsk (Go)"
		if r.App == benchmark.AppXDPSock {
			app = "xdpsock (C)"
		}
		return fmt.Sprintf("%s, %s, %s", r.Kind, place, app)
	}
	return r.Name
}

// lossText lists the losses of r with their share of what was sent.
func lossText(r benchmark.Result) string {
	var parts []string
	pct := func(n uint64) string {
		if r.Sent == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.1f%%)", float64(n)/float64(r.Sent)*100)
	}
	for _, l := range r.Lost {
		parts = append(parts, fmt.Sprintf("%s %s%s", l.Cause, count(l.Frames), pct(l.Frames)))
	}
	if r.Unaccounted != 0 {
		parts = append(parts, fmt.Sprintf("unaccounted %d", r.Unaccounted))
	}
	if r.Note != "" {
		parts = append(parts, "_"+r.Note+"_")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// count writes a frame count with a unit people read at a glance.
func count(n uint64) string {
	switch {
	case n >= 10_000_000:
		return fmt.Sprintf("%.0fM", float64(n)/1e6)
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.0fk", float64(n)/1e3)
	}
	return strconv.FormatUint(n, 10)
}

func secs(s float64) string { return (time.Duration(s * float64(time.Second))).String() }

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/loader"
	"github.com/xdpdrop/xdpdrop/metrics"
	"github.com/xdpdrop/xdpdrop/xsk"
)

// verdictRow is one verdict counter in `stats --json`.
type verdictRow struct {
	Verdict string  `json:"verdict"` // drop, pass, malformed, default
	Packets uint64  `json:"packets"`
	Bytes   uint64  `json:"bytes"`
	PPS     float64 `json:"pps,omitempty"` // with --watch: rate since the last sample
	BPS     float64 `json:"bytes_per_second,omitempty"`
}

// ifaceStats is one interface in `stats --json`.
type ifaceStats struct {
	Interface string       `json:"interface"`
	Program   string       `json:"program"`
	Mode      string       `json:"mode"`
	Time      time.Time    `json:"time"`
	Verdicts  []verdictRow `json:"verdicts,omitempty"` // fast drop
	Rules     []ruleRate   `json:"rules,omitempty"`    // fast drop
	Queues    []queueRow   `json:"queues,omitempty"`   // redirect: queues that saw traffic

	rated bool // rates were computed (there was an earlier sample)
}

// queueRow is one rx queue of a redirect program in `stats --json`.
type queueRow struct {
	Queue      int     `json:"queue"`
	Redirected uint64  `json:"redirected"` // to the queue's AF_XDP socket
	Passed     uint64  `json:"passed"`     // to the kernel stack (fast drop: chosen by a redirect rule, but no socket was bound)
	Dropped    uint64  `json:"dropped"`    // by the queue's filter
	Aborted    uint64  `json:"aborted"`
	Bytes      uint64  `json:"bytes"`
	PPS        float64 `json:"pps,omitempty"` // all verdicts, with --watch
}

type ruleRate struct {
	ruleRow
	PPS float64 `json:"pps,omitempty"`
}

func (a *app) statsCmd() *cobra.Command {
	var iface string
	var watch, jsonOut bool
	var interval time.Duration
	var top int
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "stats [--iface IF] [--watch] [--json]",
		Short: "Show counters per verdict and per rule, with rates while watching",
		Long: `stats prints the counters of the fast drop attached to an interface (or to
every interface that has one): frames and bytes per verdict (drop, pass,
malformed, default policy) and per rule. For an interface on which
'xdpdrop redirect' runs, it prints the redirect program's counters per rx
queue: frames redirected to the AF_XDP socket, passed to the stack, dropped
by the filter. With --watch it samples every
--interval and shows rates; stop it with Ctrl-C. In text output, rules that
matched nothing are hidden and at most --top rules are shown, busiest first;
--json always lists every rule (one JSON document per sample).`,
		Example: `  xdpdrop stats --iface eth3
  xdpdrop stats --iface eth3 --watch --interval 2s
  xdpdrop stats --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return usagef("--interval %s: must be positive", interval)
			}
			if top < 0 {
				return usagef("--top %d: want 0 (all rules) or more", top)
			}
			if metricsAddr != "" && !watch {
				return usagef("--metrics needs --watch (a one-shot stats exits at once)")
			}
			return a.stats(cmd.Context(), iface, watch, jsonOut, interval, top, metricsAddr)
		},
	}
	cmd.Flags().StringVar(&iface, "iface", "", "only this interface")
	cmd.Flags().BoolVar(&watch, "watch", false, "keep sampling and show rates until Ctrl-C")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "sampling interval with --watch")
	cmd.Flags().IntVar(&top, "top", 20, "text output: show at most this many rules (0: all)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	cmd.Flags().StringVar(&metricsAddr, "metrics", "", "with --watch: also serve Prometheus metrics at http://ADDR/metrics")
	return cmd
}

// dropSource is one fast-drop attachment that stats samples.
type dropSource struct {
	att *loader.Attachment
	eng *fastdrop.Engine
}

// statsSource is one attachment that stats samples: fast drop (verdicts
// and rules) or a running redirect (per-queue verdicts).
type statsSource interface {
	sample() (*ifaceStats, error)
	close()
}

func (s dropSource) close() {
	s.eng.Close()
	s.att.Close()
}

// redirectSource reads the per-queue counters of a redirect program that
// an `xdpdrop redirect` process (or a Go program using xsk) is running.
type redirectSource struct {
	iface, mode string
	red         *xsk.Redirect
}

func (s redirectSource) close() { s.red.Close() }

func (s redirectSource) sample() (*ifaceStats, error) {
	qs, err := s.red.Counters()
	if err != nil {
		return nil, fmt.Errorf("read queue counters of %s: %w", s.iface, err)
	}
	st := &ifaceStats{Interface: s.iface, Program: "redirect", Mode: s.mode, Time: time.Now()}
	for _, q := range qs {
		if q.Redirected.Packets+q.Passed.Packets+q.Dropped.Packets+q.Aborted.Packets == 0 {
			continue
		}
		st.Queues = append(st.Queues, queueRow{
			Queue: q.Queue, Redirected: q.Redirected.Packets, Passed: q.Passed.Packets,
			Dropped: q.Dropped.Packets, Aborted: q.Aborted.Packets,
			Bytes: q.Redirected.Bytes + q.Passed.Bytes + q.Dropped.Bytes + q.Aborted.Bytes,
		})
	}
	return st, nil
}

// findStatsSources opens what stats reads on iface, or on every interface.
func (a *app) findStatsSources(iface string) ([]statsSource, error) {
	sts, err := loader.Status(iface, a.pinRoot)
	if err != nil {
		return nil, err
	}
	var srcs []statsSource
	fail := func(err error) ([]statsSource, error) {
		for _, s := range srcs {
			s.close()
		}
		return nil, err
	}
	for _, st := range sts {
		if st.Stale {
			continue
		}
		if ours(st, programFastdrop) {
			att, eng, err := a.needDrop(st.Interface)
			if err != nil {
				return fail(err)
			}
			srcs = append(srcs, dropSource{att, eng})
			continue
		}
		for _, p := range st.Programs {
			if !p.Ours || p.Meta == nil || p.Meta.Config["program"] != "redirect" {
				continue
			}
			prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(p.ID))
			if err != nil {
				return fail(fmt.Errorf("open the redirect program of %s: %w", st.Interface, err))
			}
			red, err := xsk.OpenRedirect(prog)
			prog.Close()
			if err != nil {
				return fail(err)
			}
			srcs = append(srcs, redirectSource{iface: st.Interface, mode: p.Mode.String(), red: red})
		}
	}
	if len(srcs) == 0 {
		for _, st := range sts {
			for _, p := range st.Programs {
				if p.Opaque && !p.Ours {
					// A running redirect is not pinned: it is found by
					// opening programs by id.
					return nil, fmt.Errorf("no fast drop pinned on %s, and its XDP program %d cannot be inspected: "+
						"opening a program by id (a running redirect's counters) needs CAP_SYS_ADMIN, which this process lacks", st.Interface, p.ID)
				}
			}
		}
		if iface != "" {
			return nil, fmt.Errorf("neither fast drop nor redirect runs on %s: attach fast drop with 'xdpdrop drop --iface %s --rules FILE'", iface, iface)
		}
		return nil, fmt.Errorf("no fast drop or redirect attached anywhere: attach fast drop with 'xdpdrop drop --iface IF --rules FILE'")
	}
	return srcs, nil
}

func (a *app) stats(ctx context.Context, iface string, watch, jsonOut bool, interval time.Duration, top int, metricsAddr string) error {
	srcs, err := a.findStatsSources(iface)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range srcs {
			s.close()
		}
	}()
	if metricsAddr != "" {
		drops := metrics.NewDropCollector(0)
		queues := metrics.NewXSKCollector()
		for _, s := range srcs {
			switch s := s.(type) {
			case dropSource:
				drops.Set(s.att.Interface(), s.eng)
			case redirectSource:
				queues.SetProgram(s.iface, s.red)
			}
		}
		stop, err := a.serveMetrics(ctx, metricsAddr, drops, queues)
		if err != nil {
			return err
		}
		defer stop()
	}

	prev := make([]*ifaceStats, len(srcs))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		for i, s := range srcs {
			cur, err := s.sample()
			if err != nil {
				return err
			}
			if prev[i] != nil {
				addRates(cur, prev[i])
			}
			prev[i] = cur
			if jsonOut {
				if err := writeJSONLine(a.stdout, cur, watch); err != nil {
					return err
				}
			} else {
				printStats(a.stdout, cur, watch, top)
			}
		}
		if !watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func writeJSONLine(w io.Writer, v any, compact bool) error {
	if !compact {
		return writeJSON(w, v)
	}
	b, err := jsonMarshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func (s dropSource) sample() (*ifaceStats, error) {
	c, err := s.eng.Counters()
	if err != nil {
		return nil, fmt.Errorf("read counters of %s: %w", s.att.Interface(), err)
	}
	st := &ifaceStats{
		Interface: s.att.Interface(), Program: programFastdrop, Mode: s.att.Mode().String(), Time: time.Now(),
		Verdicts: []verdictRow{
			{Verdict: "drop", Packets: c.Drop.Packets, Bytes: c.Drop.Bytes},
			{Verdict: "pass", Packets: c.Pass.Packets, Bytes: c.Pass.Bytes},
			{Verdict: "redirect", Packets: c.Redirect.Packets, Bytes: c.Redirect.Bytes},
			{Verdict: "malformed", Packets: c.Malformed.Packets, Bytes: c.Malformed.Bytes},
			{Verdict: "default", Packets: c.Default.Packets, Bytes: c.Default.Bytes},
			{Verdict: "banned", Packets: c.Banned.Packets, Bytes: c.Banned.Bytes},
		},
	}
	// What the redirect rules chose, by rx queue (xdpdrop redirect's).
	qs, err := s.eng.QueueCounters()
	if err != nil {
		return nil, fmt.Errorf("read queue counters of %s: %w", s.att.Interface(), err)
	}
	for _, q := range qs {
		if q.Redirected.Packets+q.NoSocket.Packets == 0 {
			continue
		}
		st.Queues = append(st.Queues, queueRow{Queue: q.Queue, Redirected: q.Redirected.Packets, Passed: q.NoSocket.Packets,
			Bytes: q.Redirected.Bytes + q.NoSocket.Bytes})
	}
	rows := ruleRows(c)
	st.Rules = make([]ruleRate, len(rows)) // a million rules: no regrowing
	for i, r := range rows {
		st.Rules[i].ruleRow = r
	}
	return st, nil
}

// addRates fills in rates from the previous sample. Rules are matched by
// text, since rules may have been added or removed in between.
func addRates(cur, prev *ifaceStats) {
	dt := cur.Time.Sub(prev.Time).Seconds()
	if dt <= 0 {
		return
	}
	cur.rated = true
	for i := range cur.Verdicts {
		p := prev.Verdicts[i]
		cur.Verdicts[i].PPS = float64(cur.Verdicts[i].Packets-p.Packets) / dt
		cur.Verdicts[i].BPS = float64(cur.Verdicts[i].Bytes-p.Bytes) / dt
	}
	pq := make(map[int]uint64, len(prev.Queues))
	for _, q := range prev.Queues {
		pq[q.Queue] = q.Redirected + q.Passed + q.Dropped + q.Aborted
	}
	for i, q := range cur.Queues {
		n := q.Redirected + q.Passed + q.Dropped + q.Aborted
		if p, ok := pq[q.Queue]; ok && n >= p {
			cur.Queues[i].PPS = float64(n-p) / dt
		}
	}
	before := make(map[string]uint64, len(prev.Rules))
	for _, r := range prev.Rules {
		before[r.Rule] = r.Packets
	}
	for i, r := range cur.Rules {
		if p, ok := before[r.Rule]; ok && r.Packets >= p {
			cur.Rules[i].PPS = float64(r.Packets-p) / dt
		}
	}
}

func printStats(w io.Writer, st *ifaceStats, watch bool, top int) {
	fmt.Fprintf(w, "%s  %s, %s mode  %s\n", st.Interface, st.Program, st.Mode, st.Time.Format("15:04:05"))
	if st.Program == "redirect" {
		printQueueStats(w, st, watch)
		return
	}
	tw := table(w)
	if watch {
		fmt.Fprintln(tw, "  VERDICT\tPACKETS\tBYTES\tRATE\t")
	} else {
		fmt.Fprintln(tw, "  VERDICT\tPACKETS\tBYTES\t")
	}
	for _, v := range st.Verdicts {
		if watch && !st.rated {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t-\t\n", v.Verdict, v.Packets, v.Bytes)
		} else if watch {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%s, %s\t\n", v.Verdict, v.Packets, v.Bytes, rate(v.PPS), bitRate(v.BPS))
		} else {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t\n", v.Verdict, v.Packets, v.Bytes)
		}
	}
	tw.Flush()

	rules := slices.Clone(st.Rules)
	rules = slices.DeleteFunc(rules, func(r ruleRate) bool { return r.Packets == 0 })
	slices.SortStableFunc(rules, func(a, b ruleRate) int {
		if a.PPS != b.PPS {
			if a.PPS > b.PPS {
				return -1
			}
			return 1
		}
		if a.Packets != b.Packets {
			if a.Packets > b.Packets {
				return -1
			}
			return 1
		}
		return a.Index - b.Index
	})
	hidden := len(st.Rules) - len(rules)
	if top > 0 && len(rules) > top {
		hidden += len(rules) - top
		rules = rules[:top]
	}
	tw = table(w)
	if watch {
		fmt.Fprintln(tw, "  #\tRULE\tPACKETS\tBYTES\tRATE\t")
	} else {
		fmt.Fprintln(tw, "  #\tRULE\tPACKETS\tBYTES\t")
	}
	for _, r := range rules {
		if watch && !st.rated {
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t-\t\n", r.Index+1, r.Rule, r.Packets, r.Bytes)
		} else if watch {
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%s\t\n", r.Index+1, r.Rule, r.Packets, r.Bytes, rate(r.PPS))
		} else {
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t\n", r.Index+1, r.Rule, r.Packets, r.Bytes)
		}
	}
	tw.Flush()
	if hidden > 0 {
		fmt.Fprintf(w, "  (%d more rules not shown: no matches or beyond --top)\n", hidden)
	}
	printLimitStats(w, rules)
	fmt.Fprintln(w)
}

// printLimitStats shows what the limit rules among rules let through and
// dropped, and the bans they made.
func printLimitStats(w io.Writer, rules []ruleRate) {
	var tw = table(w)
	n := 0
	for _, r := range rules {
		l := r.Limit
		if l == nil {
			continue
		}
		if n == 0 {
			fmt.Fprintln(tw, "  #\tLIMIT RULE\tCONFORM\tEXCEED\tCONFORM BYTES\tEXCEED BYTES\tBANS\t")
		}
		n++
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%d\t%d\t%d\t\n", r.Index+1, r.Rule, l.Conform.Packets, l.Exceed.Packets, l.Conform.Bytes, l.Exceed.Bytes, l.Bans)
	}
	tw.Flush()
}

func printQueueStats(w io.Writer, st *ifaceStats, watch bool) {
	tw := table(w)
	fmt.Fprintln(tw, "  QUEUE\tREDIRECTED\tTO STACK\tDROPPED\tABORTED\tBYTES\tRATE\t")
	for _, q := range st.Queues {
		r := "-"
		if watch && st.rated {
			r = rate(q.PPS)
		}
		fmt.Fprintf(tw, "  %d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", q.Queue, q.Redirected, q.Passed, q.Dropped, q.Aborted, q.Bytes, r)
	}
	tw.Flush()
	if len(st.Queues) == 0 {
		fmt.Fprintln(w, "  (no traffic yet)")
	}
	fmt.Fprintln(w)
}

package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/loader"
	"github.com/xdpdrop/xdpdrop/metrics"
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
	Verdicts  []verdictRow `json:"verdicts"`
	Rules     []ruleRate   `json:"rules"`

	rated bool // rates were computed (there was an earlier sample)
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
malformed, default policy) and per rule. With --watch it samples every
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

func (a *app) stats(ctx context.Context, iface string, watch, jsonOut bool, interval time.Duration, top int, metricsAddr string) error {
	var ifaces []string
	if iface != "" {
		ifaces = []string{iface}
	} else {
		sts, err := loader.Status("", "")
		if err != nil {
			return err
		}
		for _, st := range sts {
			if !st.Stale && ours(st, programFastdrop) {
				ifaces = append(ifaces, st.Interface)
			}
		}
		if len(ifaces) == 0 {
			return fmt.Errorf("no fast drop attached anywhere: attach it with 'xdpdrop drop --iface IF --rules FILE'")
		}
	}
	var srcs []dropSource
	defer func() {
		for _, s := range srcs {
			s.eng.Close()
			s.att.Close()
		}
	}()
	for _, name := range ifaces {
		att, eng, err := needDrop(name)
		if err != nil {
			return err
		}
		srcs = append(srcs, dropSource{att, eng})
	}
	if metricsAddr != "" {
		drops := metrics.NewDropCollector(0)
		for _, s := range srcs {
			drops.Set(s.att.Interface(), s.eng)
		}
		stop, err := a.serveMetrics(ctx, metricsAddr, drops)
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
			cur, err := sample(s)
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

func sample(s dropSource) (*ifaceStats, error) {
	c, err := s.eng.Counters()
	if err != nil {
		return nil, fmt.Errorf("read counters of %s: %w", s.att.Interface(), err)
	}
	st := &ifaceStats{
		Interface: s.att.Interface(), Program: programFastdrop, Mode: s.att.Mode().String(), Time: time.Now(),
		Verdicts: []verdictRow{
			{Verdict: "drop", Packets: c.Drop.Packets, Bytes: c.Drop.Bytes},
			{Verdict: "pass", Packets: c.Pass.Packets, Bytes: c.Pass.Bytes},
			{Verdict: "malformed", Packets: c.Malformed.Packets, Bytes: c.Malformed.Bytes},
			{Verdict: "default", Packets: c.Default.Packets, Bytes: c.Default.Bytes},
		},
	}
	for _, r := range ruleRows(c) {
		st.Rules = append(st.Rules, ruleRate{ruleRow: r})
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
	fmt.Fprintln(w)
}

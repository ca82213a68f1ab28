package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/loader"
	"github.com/xdpdrop/xdpdrop/metrics"
)

// serveMetrics serves the collectors at http://addr/metrics until ctx ends
// or stop is called. It returns once the address is bound, so a bad
// address is an error of the command, not of a goroutine.
func (a *app) serveMetrics(ctx context.Context, addr string, cs ...prometheus.Collector) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w (choose a free address, e.g. 127.0.0.1:9431)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(a.stderr, "serving metrics on http://%s/metrics\n", ln.Addr())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		<-ctx.Done()
		shutdown, c := context.WithTimeout(context.Background(), 2*time.Second)
		defer c()
		_ = srv.Shutdown(shutdown)
	}()
	return func() { cancel(); <-done }, nil
}

func (a *app) exporterCmd() *cobra.Command {
	var addr string
	var ifaces []string
	var maxRules int
	var rescan time.Duration
	cmd := &cobra.Command{
		Use:   "exporter --metrics ADDR [--iface IF]...",
		Short: "Serve the counters of every attached fast drop as Prometheus metrics",
		Long: `exporter serves the counters of the fast-drop programs pinned on the given
interfaces (or on every interface, found again every --rescan) at
http://ADDR/metrics, until Ctrl-C. Metrics:

  xdpdrop_packets_total{interface,verdict}        drop, pass, malformed, default
  xdpdrop_bytes_total{interface,verdict}
  xdpdrop_rule_packets_total{interface,rule,action}  rules that matched, busiest first
  xdpdrop_rule_bytes_total{interface,rule,action}
  xdpdrop_rules{interface,kind}                   compound, prefix
  xdpdrop_rule_series_omitted{interface}          matched rules beyond --max-rule-series
  xdpdrop_rule_samples_total{interface,result}    sent, lost: rules' sample modifiers
  xdpdrop_counters_up{interface}

The long-running commands (redirect, stats --watch, demo) take --metrics too.`,
		Example: `  xdpdrop exporter --metrics 127.0.0.1:9431
  xdpdrop exporter --metrics :9431 --iface eth3 --max-rule-series 100`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.exporter(cmd.Context(), addr, ifaces, maxRules, rescan)
		},
	}
	cmd.Flags().StringVar(&addr, "metrics", "", "address to serve /metrics on, host:port (required)")
	cmd.Flags().StringArrayVar(&ifaces, "iface", nil, "interface to export (repeatable; default: all with fast drop)")
	cmd.Flags().IntVar(&maxRules, "max-rule-series", metrics.DefaultMaxRuleSeries, "at most this many per-rule series per interface")
	cmd.Flags().DurationVar(&rescan, "rescan", 10*time.Second, "how often to look for fast drop on new interfaces")
	_ = cmd.MarkFlagRequired("metrics")
	return cmd
}

func (a *app) exporter(ctx context.Context, addr string, ifaces []string, maxRules int, rescan time.Duration) error {
	if rescan <= 0 {
		return usagef("--rescan %s: must be positive", rescan)
	}
	if maxRules < 1 {
		return usagef("--max-rule-series %d: want 1 or more", maxRules)
	}
	drops := metrics.NewDropCollector(maxRules)

	type open struct {
		att *loader.Attachment
		eng *fastdrop.Engine
		id  uint32
	}
	opened := map[string]open{}
	defer func() {
		for _, o := range opened {
			o.eng.Close()
			o.att.Close()
		}
	}()
	// scan finds fast drop on the interfaces and opens engines for new
	// attachments only: opening one reads its whole rule set back.
	scan := func() error {
		want := map[string]uint32{} // interface -> program id
		var sts []loader.IfaceStatus
		if len(ifaces) == 0 {
			var err error
			if sts, err = loader.Status("", a.pinRoot); err != nil {
				return err
			}
		}
		for _, name := range ifaces {
			st, err := loader.Status(name, a.pinRoot)
			if err != nil {
				fmt.Fprintf(a.stderr, "xdpdrop: %s\n", explain(err))
				continue
			}
			sts = append(sts, st...)
		}
		for _, st := range sts {
			if st.Stale || !ours(st, programFastdrop) {
				continue
			}
			for _, p := range st.Programs {
				if p.Ours {
					want[st.Interface] = p.ID
				}
			}
		}
		for name, o := range opened {
			if want[name] != o.id {
				drops.Set(name, nil)
				o.eng.Close()
				o.att.Close()
				delete(opened, name)
			}
		}
		for name, id := range want {
			if _, ok := opened[name]; ok {
				continue
			}
			att, eng, err := a.openDrop(name)
			if err != nil {
				fmt.Fprintf(a.stderr, "xdpdrop: %s\n", explain(err))
				continue
			}
			opened[name] = open{att, eng, id}
			drops.Set(name, eng)
		}
		return nil
	}
	// Scan before serving, so that the first scrape already sees them.
	if err := scan(); err != nil {
		return err
	}
	stop, err := a.serveMetrics(ctx, addr, drops)
	if err != nil {
		return err
	}
	defer stop()
	t := time.NewTicker(rescan)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := scan(); err != nil {
				fmt.Fprintf(a.stderr, "xdpdrop: rescan: %s\n", explain(err))
			}
		}
	}
}

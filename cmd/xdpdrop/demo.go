package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/loader"
	"github.com/xdpdrop/xdpdrop/metrics"
	"github.com/xdpdrop/xdpdrop/pktgen"
	"github.com/xdpdrop/xdpdrop/sandbox"
)

// demoPrefix starts the names of the demo's sandboxes.
const demoPrefix = "xdd"

// demoRules is the example rule set of the default sandbox.
const demoRules = `# xdpdrop demo rules (syntax: docs/RULES.md)
policy pass
drop udp dport 11211          # memcached amplification
drop tcp dport 23             # telnet scanners
drop src 203.0.0.0/16         # a blocklisted network ...
pass src 203.0.113.0/24       # ... with an exception: the longest prefix wins
drop src 2001:db8:bad::/48    # an IPv6 blocklist entry
`

// demoTraffic is the mix the demo sends: one template per kind of traffic,
// each spread over flows source addresses and ports.
func demoTraffic() []struct {
	name  string
	frame pktgen.Frame
	flows uint32
} {
	frame := func(proto uint8, src, dst string, sport, dport uint16, payload int) pktgen.Frame {
		return pktgen.FrameSpec{
			Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
			Proto: proto, SrcPort: sport, DstPort: dport, Payload: pktgen.Pattern(payload),
		}.Build()
	}
	udp := func(src, dst string, sport, dport uint16) pktgen.Frame {
		return frame(pktgen.ProtoUDP, src, dst, sport, dport, 18)
	}
	tcp := func(src, dst string, dport uint16) pktgen.Frame {
		return frame(pktgen.ProtoTCP, src, dst, 1024, dport, 0)
	}
	return []struct {
		name  string
		frame pktgen.Frame
		flows uint32
	}{
		{"memcached reflection (udp 11211)", udp("192.0.2.1", "198.18.0.1", 11211, 11211), 4096},
		{"telnet scan (tcp 23)", tcp("198.51.100.1", "198.18.0.1", 23), 4096},
		{"udp from 203.0.0.0/16", udp("203.0.0.1", "198.18.0.1", 5353, 53), 65536},
		{"https (tcp 443)", tcp("198.18.0.2", "198.18.0.1", 443), 256},
		{"udp from 2001:db8:bad::/48", udp("2001:db8:bad::1", "2001:db8::1", 1024, 53), 1},
	}
}

func (a *app) demoCmd() *cobra.Command {
	var duration time.Duration
	var mode string
	var jsonOut bool
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "demo [--duration 10s]",
		Short: "Run fast drop on a veth sandbox with mixed traffic and live counters",
		Long: `demo shows what xdpdrop does without touching any real interface. It
creates a veth pair with one end in a new network namespace, attaches fast
drop with a small example rule set to the other end, sends a mix of attack
and normal traffic at full speed with the live-frames generator, and prints
per-rule counters and rates every second. When --duration is over, or on
Ctrl-C, it removes everything it created.

The rules:
` + demoRules,
		Example: `  xdpdrop demo
  xdpdrop demo --duration 30s --mode generic`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.demo(cmd.Context(), duration, mode, jsonOut, metricsAddr)
		},
	}
	cmd.Flags().DurationVar(&duration, "duration", 10*time.Second, "how long to send traffic")
	cmd.Flags().StringVar(&mode, "mode", "driver", "XDP mode on the sandbox: driver or generic")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print each sample as a JSON line instead of tables")
	cmd.Flags().StringVar(&metricsAddr, "metrics", "", "also serve Prometheus metrics at http://ADDR/metrics")
	return cmd
}

func (a *app) demo(ctx context.Context, duration time.Duration, modeName string, jsonOut bool, metricsAddr string) (err error) {
	mode, err := loader.ParseMode(modeName)
	if err != nil || (mode != loader.ModeDriver && mode != loader.ModeGeneric) {
		return usagef("--mode %q: want driver or generic", modeName)
	}
	if duration <= 0 {
		return usagef("--duration %s: must be positive", duration)
	}
	rs, err := fastdrop.Parse(strings.NewReader(demoRules), "demo rules")
	if err != nil {
		return err
	}

	// A demo killed with SIGKILL could not remove its sandbox: remove those
	// now (never one whose demo still runs).
	stale, err := sandbox.RemoveStale(demoPrefix)
	for _, ns := range stale {
		fmt.Fprintf(a.stderr, "removed the sandbox (namespace %s and its veth) that a demo which no longer runs left behind\n", ns)
	}
	if err != nil {
		fmt.Fprintf(a.stderr, "xdpdrop: %v (remove it with 'ip netns delete NAME')\n", err)
	}

	// GRO on the host end: a generic program on veth only sees frames that
	// arrive by XDP_TX from the peer when GRO makes veth use NAPI.
	box, err := sandbox.New(sandbox.Options{Prefix: demoPrefix, GRO: mode == loader.ModeGeneric})
	if err != nil {
		return fmt.Errorf("create the sandbox: %w", err)
	}
	defer func() { err = errors.Join(err, box.Close()) }()
	if !jsonOut {
		fmt.Fprintf(a.stdout, "sandbox: %s (here) <-> %s (namespace %s)\n", box.Name, box.Peer, box.NSName)
	}

	eng, err := fastdrop.New(fastdrop.CapacityFor(rs, 1))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, eng.Close()) }()
	if err := eng.Apply(rs); err != nil {
		return err
	}
	// Not pinned: the attachment goes away with this process.
	att, err := loader.Attach(eng.Program(), loader.Options{
		Interface: box.Name, Mode: mode,
		Config: map[string]string{"program": programFastdrop, "demo": "true"},
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, att.Close()) }()
	if !jsonOut {
		fmt.Fprintf(a.stdout, "fast drop attached to %s in %s mode with %d rules; sending for %s (Ctrl-C stops)\n\n",
			box.Name, att.Mode(), len(rs.Rules), duration)
	}

	if metricsAddr != "" {
		drops := metrics.NewDropCollector(0)
		drops.Set(box.Name, eng)
		stop, err := a.serveMetrics(ctx, metricsAddr, drops)
		if err != nil {
			return err
		}
		defer stop()
	}

	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	var wg sync.WaitGroup
	var genErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		genErr = box.InPeerNS(func() error { return sendMix(ctx, box.PeerIdx) })
	}()

	src := dropSource{att: att, eng: eng}
	var prev *ifaceStats
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	tty := isTerminal(a.stdout)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
		}
		cur, err := src.sample()
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		if prev != nil {
			addRates(cur, prev)
		}
		prev = cur
		if jsonOut {
			if err := writeJSONLine(a.stdout, cur, true); err != nil {
				return err
			}
			continue
		}
		if tty && !done {
			fmt.Fprint(a.stdout, "\033[H\033[2J")
		}
		printStats(a.stdout, cur, true, 0)
	}
	wg.Wait()
	if genErr != nil && !errors.Is(genErr, context.DeadlineExceeded) && !errors.Is(genErr, context.Canceled) {
		return fmt.Errorf("traffic generator: %w", genErr)
	}
	if !jsonOut {
		fmt.Fprintf(a.stdout, "removing the sandbox (%s, namespace %s)\n", box.Name, box.NSName)
	}
	return nil
}

// sendMix cycles over the demo's traffic kinds until ctx ends. It runs in
// the peer's namespace.
func sendMix(ctx context.Context, ifindex int) error {
	traffic := demoTraffic()
	gens := make([]*pktgen.Generator, len(traffic))
	defer func() {
		for _, g := range gens {
			if g != nil {
				g.Close()
			}
		}
	}()
	for i, t := range traffic {
		opts := pktgen.Options{Flows: t.flows}
		if t.frame.L3 >= 0 && t.frame.Bytes[t.frame.L3]>>4 == 4 {
			opts.IPOffset, opts.L4Offset = uint32(t.frame.L3), uint32(t.frame.L4)
		}
		g, err := pktgen.New(opts)
		if err != nil {
			return err
		}
		gens[i] = g
	}
	for ctx.Err() == nil {
		for i, t := range traffic {
			if _, err := gens[i].Send(ifindex, t.frame.Bytes, 20_000, 64); err != nil {
				return err
			}
		}
	}
	return nil
}

// isTerminal reports whether w is a terminal (for redrawing in place).
func isTerminal(w any) bool {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

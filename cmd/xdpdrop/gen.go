package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"time"

	"github.com/spf13/cobra"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/xdpdrop/xdpdrop/pktgen"
	"github.com/xdpdrop/xdpdrop/sandbox"
	"github.com/xdpdrop/xdpdrop/xsk"
)

type genFlags struct {
	iface, netns     string
	engine           string
	proto            string
	size             int
	src, dst         string
	sport, dport     uint16
	srcMAC, dstMAC   string
	flows            uint32
	vlan             int
	rate             uint64
	count            uint64
	duration         time.Duration
	batch            uint32
	inFlight         int
	hold             string
	chunk            uint64
	callTime         time.Duration
	jsonOut, quietly bool
}

// genSummary is the JSON shape of `xdpdrop gen --json`.
type genSummary struct {
	Interface string  `json:"interface"`
	Engine    string  `json:"engine"`
	Proto     string  `json:"proto"`
	Size      int     `json:"frame_bytes"`
	Flows     uint32  `json:"flows"`
	Frames    uint64  `json:"frames"`
	Seconds   float64 `json:"seconds"`
	PPS       float64 `json:"pps"`
	// Live frames only: the calls made, how many ran at once, and the
	// CPU time the sending threads used, also as a share of what they
	// could have used (the rest they spent waiting).
	Calls    uint64  `json:"calls,omitempty"`
	InFlight int     `json:"in_flight,omitempty"`
	CPUSecs  float64 `json:"cpu_seconds,omitempty"`
	BusyPct  float64 `json:"busy_pct,omitempty"`
	// IdlePct is the share in which they neither ran nor waited for a
	// CPU: they slept in the kernel (a lower bound with several threads
	// on one CPU).
	IdlePct float64 `json:"idle_pct,omitempty"`
	// Held: a holding run kept the program in the kernel's XDP
	// dispatcher (--hold).
	Held bool `json:"held,omitempty"`
}

func (a *app) genCmd() *cobra.Command {
	f := &genFlags{}
	cmd := &cobra.Command{
		Use:   "gen --iface IF [flags]",
		Short: "Generate UDP or TCP SYN traffic out of an interface at full speed",
		Long: `gen transmits frames out of an interface with the kernel's XDP live-frames
test run (BPF_PROG_TEST_RUN + XDP_TX): one CPU reaches about 10 Mpps into a
veth peer, far above what socket-based senders manage. The frames vary over
--flows source addresses and ports so that receive-side scaling spreads them.
It stops after --count frames or --duration, or on Ctrl-C.

Each test run with more than one repeat adds the program to the kernel's
XDP dispatcher and removes it at the end, unless another run of the same
program is in progress, and both changes wait for an RCU grace period
(10-30 ms on a loaded VM): a run of 65536 frames alone sleeps most of the
time. So gen keeps one more run of the program in progress while it sends
(--hold): a holding run at idle scheduling priority that sends nothing and
runs only when nothing else wants the CPU. Then no sending run waits for a
grace period, and each is sized to take about a second (--call-time;
--chunk fixes the size instead): each run also takes the dispatcher's lock,
for which it may wait while another process's test run waits for a grace
period. Ctrl-C and --duration interrupt the runs in progress, and the
program counts what they sent. Without a holding run (--hold off, or paced
with --rate), gen keeps two sending runs in flight, started apart
(--in-flight); paced, each run sends 50ms worth at once. All of gen's threads share one CPU, the one gen starts
on (choose it with taskset), as a single sender would. The summary says
how busy the sending threads kept it: well under 100% means the
generator, not the receiver, set the rate.

--engine xsk sends through an AF_XDP socket instead (the txonly loop of
package xsk, on queue 0 of the interface, zero-copy where the driver has
it): a second engine to check the first against, and the only one on
interfaces without native XDP_TX. It sends one frame template (--flows 1),
and --count is a lower bound there: frames already on the TX ring when the
count is reached still go out, and the summary counts them.

Only send traffic on interfaces you own: on a veth pair, frames arrive at
the peer; on a NIC, they leave on the wire.`,
		Example: `  xdpdrop gen --iface veth0 --count 10000000
  xdpdrop gen --iface veth0 --proto tcp --flows 65536 --duration 10s --json
  xdpdrop gen --netns lab --iface veth1 --size 1500 --rate 100000 --duration 5s
  xdpdrop gen --iface veth0 --engine xsk --duration 10s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.gen(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.iface, "iface", "", "interface to send out of (required)")
	fl.StringVar(&f.netns, "netns", "", "named network namespace (ip netns) that holds the interface")
	fl.StringVar(&f.engine, "engine", "live", "live (XDP live frames: BPF_PROG_TEST_RUN + XDP_TX) or xsk (AF_XDP txonly on queue 0)")
	fl.StringVar(&f.proto, "proto", "udp", "udp or tcp (TCP SYN)")
	fl.IntVar(&f.size, "size", 64, "frame size in bytes as XDP sees it (without FCS), 60 to 9000")
	fl.StringVar(&f.src, "src", sandbox.PeerAddr4.Addr().String(), "source IPv4 or IPv6 address (the low 16 bits vary with --flows, IPv4 only)")
	fl.StringVar(&f.dst, "dst", sandbox.HostAddr4.Addr().String(), "destination address")
	fl.Uint16Var(&f.sport, "sport", 1024, "source port (varies with --flows)")
	fl.Uint16Var(&f.dport, "dport", 9, "destination port")
	fl.StringVar(&f.srcMAC, "src-mac", "", "source MAC (default: the interface's)")
	fl.StringVar(&f.dstMAC, "dst-mac", "ff:ff:ff:ff:ff:ff", "destination MAC")
	fl.Uint32Var(&f.flows, "flows", 1, "number of flows, 1 to 65536 (IPv4)")
	fl.IntVar(&f.vlan, "vlan", -1, "add an 802.1Q tag with this VLAN ID (0-4095)")
	fl.Uint64Var(&f.rate, "rate", 0, "frames per second (0: as fast as possible)")
	fl.Uint64Var(&f.count, "count", 0, "frames to send (0: no limit)")
	fl.DurationVar(&f.duration, "duration", 0, "how long to send (0: no limit)")
	fl.Uint32Var(&f.batch, "batch", 64, "frames per kernel batch, 1 to 256")
	fl.IntVar(&f.inFlight, "in-flight", 0, fmt.Sprintf("live: sending test runs in the kernel at once, each from a thread of its own, 1 to %d, "+
		"or 0: 1 with a holding run, else 2 (one alone waits for two RCU grace periods per run; two overlapping runs never do)", pktgen.MaxInFlight))
	fl.StringVar(&f.hold, "hold", "auto", "live: keep the program in the kernel's XDP dispatcher with a holding run at idle priority, so that no sending run waits for a grace period: "+
		"on, off, or auto (on unless paced with --rate, whose idle time it would fill)")
	fl.DurationVar(&f.callTime, "call-time", 0, fmt.Sprintf("live: how long each test run should take, %v to %v, or 0: %v (%v with --rate, which sends that much at once); "+
		"the frames per run are sized from the rate the previous runs reached (longer runs take the kernel's dispatcher lock less often, "+
		"and amortize the grace periods of runs that do not overlap)", pktgen.MinCallTime, pktgen.MaxCallTime, pktgen.DefaultCallTime, pktgen.DefaultPacedCallTime))
	fl.Uint64Var(&f.chunk, "chunk", 0, "live: frames per test run (0: sized by --call-time)")
	fl.BoolVar(&f.jsonOut, "json", false, "print the summary as JSON")
	fl.BoolVar(&f.quietly, "quiet", false, "no live rate display")
	_ = cmd.MarkFlagRequired("iface")
	return cmd
}

func (a *app) gen(cmd *cobra.Command, f *genFlags) error {
	spec, err := f.spec()
	if err != nil {
		return err
	}
	switch f.engine {
	case "live":
	case "xsk":
		if f.flows != 1 {
			return usagef("--flows %d: the xsk engine sends one frame template; use --engine live for flows", f.flows)
		}
	default:
		return usagef("--engine %q: want live or xsk", f.engine)
	}
	if f.inFlight < 0 || f.inFlight > pktgen.MaxInFlight {
		return usagef("--in-flight %d: want 0 to %d", f.inFlight, pktgen.MaxInFlight)
	}
	hold, err := pktgen.ParseHold(f.hold)
	if err != nil {
		return usagef("--hold %q: want auto, on or off", f.hold)
	}
	if f.callTime != 0 && (f.callTime < pktgen.MinCallTime || f.callTime > pktgen.MaxCallTime) {
		return usagef("--call-time %v: want %v to %v, or 0 for the default", f.callTime, pktgen.MinCallTime, pktgen.MaxCallTime)
	}
	if f.chunk > math.MaxUint32 {
		return usagef("--chunk %d: want at most %d frames", f.chunk, uint64(math.MaxUint32))
	}
	if f.count == 0 && f.duration == 0 {
		// Ctrl-C stops it; the context from main is cancellable.
		if !f.quietly && !f.jsonOut {
			fmt.Fprintln(a.stderr, "sending until Ctrl-C (set --count or --duration to stop by itself)")
		}
	}
	if f.batch == 0 || f.batch > 256 {
		return usagef("--batch %d: want 1 to 256", f.batch)
	}
	var sum genSummary
	work := func() error {
		link, err := netlink.LinkByName(f.iface)
		if err != nil {
			return fmt.Errorf("interface %q: %w (list interfaces with 'ip link')", f.iface, err)
		}
		if f.srcMAC == "" {
			copy(spec.SrcMAC[:], link.Attrs().HardwareAddr)
		}
		fr := spec.Build()
		if f.engine == "xsk" {
			st, err := a.genXSK(cmd.Context(), link.Attrs().Index, fr.Bytes, f)
			sum = genSummary{
				Interface: f.iface, Engine: "xsk", Proto: f.proto, Size: len(fr.Bytes),
				Flows: 1, Frames: st.Sent, Seconds: st.Elapsed.Seconds(), PPS: st.PPS(),
			}
			return err
		}
		opts := pktgen.Options{Flows: f.flows, IPOffset: uint32(fr.L3), L4Offset: uint32(fr.L4)}
		if spec.Src.Is6() {
			opts.Flows = 1 // the generator varies IPv4 sources only
		}
		switch spec.Proto {
		case 17:
			opts.L4Checksum = 6
		case 6:
			opts.L4Checksum = 16
		}
		g, err := pktgen.New(opts)
		if err != nil {
			return err
		}
		defer g.Close()
		ro := pktgen.RunOptions{Count: f.count, Duration: f.duration, Rate: f.rate, Batch: f.batch,
			InFlight: f.inFlight, Hold: hold, Chunk: f.chunk, CallTime: f.callTime}
		if !f.quietly && !f.jsonOut {
			ro.Progress = func(s pktgen.Stats) {
				fmt.Fprintf(a.stderr, "%8.1fs  %12d frames  %s\n", s.Elapsed.Seconds(), s.Sent, rate(s.PPS()))
			}
		}
		st, err := g.Run(cmd.Context(), link.Attrs().Index, fr.Bytes, ro)
		sum = genSummary{
			Interface: f.iface, Engine: "live-frames", Proto: f.proto, Size: len(fr.Bytes),
			Flows: opts.Flows, Frames: st.Sent, Seconds: st.Elapsed.Seconds(), PPS: st.PPS(),
			Calls: st.Calls, InFlight: st.InFlight, CPUSecs: st.CPU.Seconds(), BusyPct: st.BusyShare() * 100,
			IdlePct: st.IdleShare() * 100, Held: st.Held,
		}
		return err
	}
	if f.netns != "" {
		ns, err := netns.GetFromName(f.netns)
		if err != nil {
			return fmt.Errorf("network namespace %q: %w (list them with 'ip netns')", f.netns, err)
		}
		defer ns.Close()
		err = sandbox.InNS(ns, work)
		if err != nil {
			return err
		}
	} else if err := work(); err != nil {
		return err
	}
	if f.jsonOut {
		return writeJSON(a.stdout, sum)
	}
	fmt.Fprintf(a.stdout, "sent %d frames of %d bytes in %.2fs: %s, %s\n",
		sum.Frames, sum.Size, sum.Seconds, rate(sum.PPS), bitRate(sum.PPS*float64(sum.Size)))
	if sum.Calls > 0 {
		held := ""
		if sum.Held {
			held = " and a holding run"
		}
		fmt.Fprintf(a.stdout, "%d test runs, %d in flight%s; the sending threads ran %.0f%% of the time (%.2fs CPU) and slept %.0f%%\n",
			sum.Calls, sum.InFlight, held, sum.BusyPct, sum.CPUSecs, sum.IdlePct)
	}
	return nil
}

// spec validates the flags and turns them into a frame spec.
func (f *genFlags) spec() (pktgen.FrameSpec, error) {
	var s pktgen.FrameSpec
	var err error
	if s.Src, err = netip.ParseAddr(f.src); err != nil {
		return s, usagef("--src %q: not an IP address", f.src)
	}
	if s.Dst, err = netip.ParseAddr(f.dst); err != nil {
		return s, usagef("--dst %q: not an IP address", f.dst)
	}
	if s.Src.Is4() != s.Dst.Is4() {
		return s, usagef("--src %s and --dst %s: use two IPv4 or two IPv6 addresses", s.Src, s.Dst)
	}
	switch f.proto {
	case "udp":
		s.Proto = 17
	case "tcp":
		s.Proto = 6
		s.TCPFlags = 0x02
	default:
		return s, usagef("--proto %q: want udp or tcp", f.proto)
	}
	if f.flows == 0 || f.flows > 65536 {
		return s, usagef("--flows %d: want 1 to 65536", f.flows)
	}
	if f.size < 60 || f.size > 9000 {
		return s, usagef("--size %d: want 60 to 9000 bytes", f.size)
	}
	s.SrcPort, s.DstPort = f.sport, f.dport
	if f.srcMAC != "" {
		mac, err := net.ParseMAC(f.srcMAC)
		if err != nil || len(mac) != 6 {
			return s, usagef("--src-mac %q: not a MAC address", f.srcMAC)
		}
		copy(s.SrcMAC[:], mac)
	}
	mac, err := net.ParseMAC(f.dstMAC)
	if err != nil || len(mac) != 6 {
		return s, usagef("--dst-mac %q: not a MAC address", f.dstMAC)
	}
	copy(s.DstMAC[:], mac)
	if f.vlan >= 0 {
		if f.vlan > 4095 {
			return s, usagef("--vlan %d: want 0 to 4095", f.vlan)
		}
		s.VLANs = []pktgen.VLAN{{TPID: 0x8100, ID: uint16(f.vlan)}}
	}
	// Size the payload so the frame is exactly --size bytes.
	hdr := len(s.Build().Bytes)
	if hdr > f.size {
		return s, usagef("--size %d: headers alone take %d bytes", f.size, hdr)
	}
	s.Payload = make([]byte, f.size-hdr)
	if got := len(s.Build().Bytes); got != f.size {
		return s, errors.New("gen: internal error sizing the frame")
	}
	return s, nil
}

// genXSK sends frame out of queue 0 of ifindex with the AF_XDP txonly loop
// until f's count, duration or rate says otherwise, or ctx ends. It runs
// in the interface's namespace (the socket binds there).
func (a *app) genXSK(ctx context.Context, ifindex int, frame []byte, f *genFlags) (pktgen.Stats, error) {
	s, err := xsk.Open(xsk.Options{Ifindex: ifindex, Queue: 0, Batch: int(f.batch)})
	if err != nil {
		return pktgen.Stats{}, err
	}
	defer s.Close()
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	start := time.Now()
	completed := func() uint64 {
		st, err := s.Stats()
		if err != nil {
			return 0
		}
		return st.Completed
	}
	if !f.quietly && !f.jsonOut {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					st := pktgen.Stats{Sent: completed(), Elapsed: time.Since(start)}
					fmt.Fprintf(a.stderr, "%8.1fs  %12d frames  %s\n", st.Elapsed.Seconds(), st.Sent, rate(st.PPS()))
				}
			}
		}()
	}
	if f.rate == 0 {
		err = xsk.TxOnly(ctx, s, frame, xsk.ModeOptions{Frames: f.count})
	} else {
		// Paced: about 10 ms worth of frames at a time, then sleep until
		// they are due.
		chunk := max(f.rate/100, 1)
		for err == nil && ctx.Err() == nil {
			n := chunk
			if f.count > 0 {
				done := completed()
				if done >= f.count {
					break
				}
				n = min(n, f.count-done)
			}
			if err = xsk.TxOnly(ctx, s, frame, xsk.ModeOptions{Frames: n}); err != nil {
				break
			}
			due := start.Add(time.Duration(float64(completed()) / float64(f.rate) * float64(time.Second)))
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(due)):
			}
		}
	}
	// Frames still on their way complete within a moment: count them.
	for range 100 {
		if s.Accounting().TX == 0 {
			break
		}
		if _, cerr := s.Complete(); cerr != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return pktgen.Stats{Sent: completed(), Elapsed: time.Since(start)}, err
}

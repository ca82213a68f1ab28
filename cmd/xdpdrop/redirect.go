package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/loader"
	"github.com/xdpdrop/xdpdrop/metrics"
	"github.com/xdpdrop/xdpdrop/xsk"
)

type redirectFlags struct {
	iface, queues, filter, mode, action, wait, metricsAddr string
	copyMode, zeroCopy, busyPoll, noNeedWakeup, sharedUMEM bool
	budget, batch, frameSize                               int
	duration                                               time.Duration
	count                                                  uint64
	jsonOut                                                bool
	lockTimeout                                            time.Duration
	rings                                                  ringFlags
}

// queueSample is one queue in the JSON lines of `redirect --json`.
type queueSample struct {
	Interface  string  `json:"interface"`
	Queue      int     `json:"queue"`
	Time       string  `json:"time"`
	RxFrames   uint64  `json:"rx_frames"`
	RxBytes    uint64  `json:"rx_bytes"`
	TxFrames   uint64  `json:"tx_frames"`
	PPS        float64 `json:"pps"`
	Redirected uint64  `json:"redirected"` // by the program, to this queue's socket
	Passed     uint64  `json:"passed"`     // by the program, to the kernel stack
	Dropped    uint64  `json:"dropped"`    // by the program's filter
	RingFull   uint64  `json:"rx_ring_full"`
	FillEmpty  uint64  `json:"rx_fill_ring_empty"`
	KernelDrop uint64  `json:"rx_dropped"`
	ZeroCopy   bool    `json:"zero_copy"`
}

func (a *app) redirectCmd() *cobra.Command {
	f := &redirectFlags{}
	cmd := &cobra.Command{
		Use:   "redirect --iface IF [--queues 0-3] [--filter RULES] --action count|drop|pcap=FILE|l2fwd",
		Short: "Hand the traffic of chosen queues to AF_XDP sockets and act on it, with live per-queue rates",
		Long: `redirect attaches the redirect program to an interface, opens one AF_XDP
socket per selected rx queue and runs in the foreground, printing per-queue
rates every second, until --duration, --count or Ctrl-C; then it detaches
and closes everything it made.

--filter takes a rule file in the fast-drop syntax (docs/RULES.md) limited
to what the redirect program evaluates itself: actions redirect (to the
socket), pass (to the kernel stack) or drop, and the fields src, dst, proto
(tcp, udp, ...), sport and dport; at most 8 rules; 'policy' sets what
happens to the rest (default pass). Without --filter every frame of the
selected queues goes to user space; other queues always go to the stack.

Actions:
  count       receive, count frames per queue and per protocol, recycle
  drop        receive and recycle without reading (the rxdrop benchmark)
  pcap=FILE   write every frame to FILE (pcap, for tcpdump and Wireshark)
  l2fwd       swap the MAC addresses and send each frame back out, no copy

` + ringsHelp,
		Example: `  xdpdrop redirect --iface eth3 --queues 0-3 --action count
  xdpdrop redirect --iface eth3 --queues 2 --filter dns.rules --action pcap=dns.pcap --duration 60s
  xdpdrop redirect --iface eth3 --action l2fwd --busy-poll --budget 256 --wait spin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.redirect(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.iface, "iface", "", "interface (required)")
	fl.StringVar(&f.queues, "queues", "0", "rx queues to redirect: 0-3, 0,2,5, or all")
	fl.StringVar(&f.filter, "filter", "", "rule file choosing which frames of those queues go to user space")
	fl.StringVar(&f.mode, "mode", "auto", "XDP mode: driver, generic or auto")
	fl.StringVar(&f.action, "action", "count", "count, drop, pcap=FILE or l2fwd")
	fl.BoolVar(&f.copyMode, "copy", false, "force copy mode")
	fl.BoolVar(&f.zeroCopy, "zero-copy", false, "require zero-copy (fails where the driver has none)")
	fl.BoolVar(&f.busyPoll, "busy-poll", false, "preferred busy polling (SO_PREFER_BUSY_POLL)")
	fl.IntVar(&f.budget, "budget", 64, "busy-poll budget: frames per NAPI poll (SO_BUSY_POLL_BUDGET)")
	fl.IntVar(&f.batch, "batch", 64, "frames per batch, 1 to 512")
	fl.IntVar(&f.frameSize, "frame-size", 4096, "UMEM frame size: 2048 or 4096")
	fl.BoolVar(&f.noNeedWakeup, "no-need-wakeup", false, "turn need_wakeup off (a wakeup system call for every batch)")
	fl.BoolVar(&f.sharedUMEM, "shared-umem", false, "one UMEM shared by the sockets of all queues")
	fl.StringVar(&f.wait, "wait", "adaptive", "when the ring is empty: adaptive (spin briefly, then sleep), block, poll (poll() before every batch), spin")
	fl.DurationVar(&f.duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	fl.Uint64Var(&f.count, "count", 0, "stop after this many frames per queue (0: no limit)")
	fl.BoolVar(&f.jsonOut, "json", false, "print per-queue samples as JSON lines")
	fl.StringVar(&f.metricsAddr, "metrics", "", "also serve Prometheus metrics at http://ADDR/metrics")
	addLockTimeout(cmd, &f.lockTimeout)
	f.rings.register(fl)
	_ = cmd.MarkFlagRequired("iface")
	return cmd
}

// parseQueues reads --queues: "0-3", "0,2,5" or "all" (nil).
func parseQueues(s string) ([]int, error) {
	q, err := xsk.ParseQueues(s)
	if err != nil {
		return nil, usagef("--queues %q: want queue numbers 0-%d like 0-3 or 0,2,5, or all", s, xsk.MaxQueues-1)
	}
	return q, nil
}

// filterFromRules turns a rule file into the redirect program's filter,
// naming the line of anything it cannot evaluate.
func filterFromRules(path string) (xsk.Filter, error) {
	rs, err := fastdrop.ParseFile(path)
	if err != nil {
		return xsk.Filter{}, err
	}
	if len(rs.Rules) > xsk.MaxRules {
		return xsk.Filter{}, fmt.Errorf("%s: %d rules: a redirect filter holds at most %d", path, len(rs.Rules), xsk.MaxRules)
	}
	action := func(a fastdrop.Action) xsk.Action {
		switch a {
		case fastdrop.ActionRedirect:
			return xsk.ActionRedirect
		case fastdrop.ActionDrop:
			return xsk.ActionDrop
		}
		return xsk.ActionPass
	}
	f := xsk.Filter{Default: action(rs.EffectivePolicy())}
	for _, r := range rs.Rules {
		if r.EtherType != 0 || r.Fragment {
			return xsk.Filter{}, fmt.Errorf("%s:%d: %q: a redirect filter matches src, dst, proto, sport and dport only", path, r.Line, r.String())
		}
		xr := xsk.Rule{Action: action(r.Action), Proto: r.Proto, HasProto: r.HasProto, Src: r.Src, Dst: r.Dst}
		if r.SrcPort != nil {
			xr.SrcPort = &xsk.PortRange{Lo: r.SrcPort.Lo, Hi: r.SrcPort.Hi}
		}
		if r.DstPort != nil {
			xr.DstPort = &xsk.PortRange{Lo: r.DstPort.Lo, Hi: r.DstPort.Hi}
		}
		f.Rules = append(f.Rules, xr)
	}
	return f, nil
}

// socketOptions are the options of every queue's socket (xsk.OpenQueues
// sets the queue and the shared UMEM).
func (f *redirectFlags) socketOptions() (xsk.Options, error) {
	o := xsk.Options{Interface: f.iface, Batch: f.batch, DisableNeedWakeup: f.noNeedWakeup,
		UMEMOptions: xsk.UMEMOptions{FrameSize: f.frameSize}}
	f.rings.apply(&o)
	switch {
	case f.copyMode && f.zeroCopy:
		return o, usagef("--copy and --zero-copy: choose one")
	case f.copyMode:
		o.Bind = xsk.BindCopy
	case f.zeroCopy:
		o.Bind = xsk.BindZeroCopy
	}
	w, err := xsk.ParseWaitMode(f.wait)
	if err != nil {
		return o, usagef("--wait %q: want adaptive, block, poll or spin", f.wait)
	}
	o.Wait = w
	if f.busyPoll {
		o.BusyPoll = xsk.BusyPoll{Enable: true, Budget: f.budget}
	}
	return o, nil
}

func (a *app) redirect(ctx context.Context, f *redirectFlags) (err error) {
	queues, err := parseQueues(f.queues)
	if err != nil {
		return err
	}
	mode, err := loader.ParseMode(f.mode)
	if err != nil {
		return usagef("--mode %q: want driver, generic or auto", f.mode)
	}
	if f.batch < 1 || f.batch > 512 {
		return usagef("--batch %d: want 1 to 512", f.batch)
	}
	if f.budget < 1 || f.budget > 65535 {
		return usagef("--budget %d: want 1 to 65535", f.budget)
	}
	if f.frameSize != 2048 && f.frameSize != 4096 {
		return usagef("--frame-size %d: want 2048 or 4096", f.frameSize)
	}
	if err := f.rings.validate(); err != nil {
		return err
	}
	act, pcapPath, _ := strings.Cut(f.action, "=")
	switch act {
	case "count", "drop", "l2fwd":
		if pcapPath != "" {
			return usagef("--action %q: only pcap takes =FILE", f.action)
		}
	case "pcap":
		if pcapPath == "" {
			return usagef("--action pcap needs a file: --action pcap=FILE")
		}
	default:
		return usagef("--action %q: want count, drop, pcap=FILE or l2fwd", f.action)
	}
	sockOpts, err := f.socketOptions()
	if err != nil {
		return err
	}
	if queues == nil {
		if queues, err = xsk.AllQueues(f.iface); err != nil {
			return err
		}
	}
	ropts := xsk.RedirectOptions{Queues: queues}
	filterNote := ""
	if f.filter != "" {
		filt, err := filterFromRules(f.filter)
		if err != nil {
			return err
		}
		filterNote = fmt.Sprintf(", filter %s: %d rules, policy %s", f.filter, len(filt.Rules), filt.Default)
		ropts.Filters = map[int]xsk.Filter{}
		for _, q := range queues {
			ropts.Filters[q] = filt
		}
	}
	if f.busyPoll {
		if note := xsk.NAPIDeferNote(f.iface); note != "" && !f.jsonOut {
			fmt.Fprintf(a.stderr, "note: %s\n", note)
		}
	}

	var pw *pcapOut
	if act == "pcap" {
		if pw, err = newPcapOut(pcapPath); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, pw.Close()) }()
	}

	red, err := xsk.NewRedirect(ropts)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, red.Close()) }()
	// The lock is held while attaching only: the program is not pinned,
	// and this process holds it until it exits.
	lk, err := a.lockIface(f.iface, f.lockTimeout)
	if err != nil {
		return err
	}
	att, err := loader.Attach(red.Program(), loader.Options{
		Interface: f.iface, Mode: mode,
		Config: map[string]string{"program": "redirect", "queues": f.queues, "action": f.action},
	})
	lk.Unlock()
	if err != nil {
		return err
	}
	// Not pinned: Close detaches.
	defer func() { err = errors.Join(err, att.Close()) }()

	qs, err := xsk.OpenQueues(red, queues, xsk.QueueOptions{Socket: sockOpts, SharedUMEM: f.sharedUMEM})
	if errors.Is(err, xsk.ErrZeroCopyUnsupported) {
		return fmt.Errorf("%w; leave out --zero-copy (the kernel then chooses) or use --copy", err)
	}
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, qs.Close()) }()
	socks := qs.Sockets
	if !f.jsonOut {
		zc := "copy"
		if socks[0].ZeroCopy() {
			zc = "zero-copy"
		}
		fmt.Fprintf(a.stdout, "redirecting queues %v of %s (%s mode, %s) to AF_XDP, action %s%s; Ctrl-C stops\n",
			queues, f.iface, att.Mode(), zc, f.action, filterNote)
		fmt.Fprintf(a.stdout, "each socket: %s\n", describeRings(socks[0].Rings(), f.frameSize))
	}
	if f.metricsAddr != "" {
		col := metrics.NewXSKCollector()
		col.SetProgram(f.iface, red)
		for _, s := range socks {
			col.SetSocket(f.iface, s.Queue(), s)
		}
		stop, err := a.serveMetrics(ctx, f.metricsAddr, col)
		if err != nil {
			return err
		}
		defer stop()
	}

	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(socks))
	protos := make([]protoCounts, len(socks))
	for i, s := range socks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = runAction(ctx, s, act, pw, &protos[i], f.count)
		}()
	}
	go func() { wg.Wait(); cancel() }() // all queues reached --count

	prev := map[int]queueSample{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := time.Now()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
		}
		now := time.Now()
		if err := a.printQueues(f, red, socks, protos, prev, now.Sub(last)); err != nil {
			cancel()
			wg.Wait()
			return err
		}
		last = now
		// Detached by another process (xdpdrop detach, ip link): the
		// sockets would wait for frames that no longer come.
		if running, err := att.Running(); err == nil && !running {
			cancel()
			wg.Wait()
			return fmt.Errorf("the redirect program is no longer attached to %s: something else detached or replaced it (xdpdrop detach, ip link); stopped", f.iface)
		}
	}
	wg.Wait()
	for i, e := range errs {
		if e != nil && !errors.Is(e, context.Canceled) && !errors.Is(e, context.DeadlineExceeded) {
			return fmt.Errorf("queue %d: %w", socks[i].Queue(), e)
		}
	}
	return nil
}

// errCountReached stops a Run loop once --count frames were handled.
var errCountReached = errors.New("count reached")

// protoCounts are the per-protocol tallies of --action count, written by
// the queue's goroutine and read by the printer.
type protoCounts struct {
	tcp, udp, icmp, other atomic.Uint64
}

func (p *protoCounts) add(b []byte) {
	proto, ok := l4Proto(b)
	switch {
	case !ok:
		p.other.Add(1)
	case proto == 6:
		p.tcp.Add(1)
	case proto == 17:
		p.udp.Add(1)
	case proto == 1 || proto == 58:
		p.icmp.Add(1)
	default:
		p.other.Add(1)
	}
}

// l4Proto reads the protocol of an untagged or single-tagged IPv4/IPv6
// frame (the first next header for IPv6).
func l4Proto(b []byte) (uint8, bool) {
	if len(b) < 14 {
		return 0, false
	}
	off, et := 14, binary.BigEndian.Uint16(b[12:14])
	if et == 0x8100 || et == 0x88a8 {
		if len(b) < 18 {
			return 0, false
		}
		off, et = 18, binary.BigEndian.Uint16(b[16:18])
	}
	switch {
	case et == 0x0800 && len(b) >= off+20:
		return b[off+9], true
	case et == 0x86dd && len(b) >= off+40:
		return b[off+6], true
	}
	return 0, false
}

// runAction drives one socket until ctx ends or limit frames were handled.
func runAction(ctx context.Context, s *xsk.Socket, act string, pw *pcapOut, pc *protoCounts, limit uint64) error {
	mo := xsk.ModeOptions{Frames: limit}
	switch act {
	case "drop":
		return xsk.RxDrop(ctx, s, mo)
	case "l2fwd":
		return xsk.L2Fwd(ctx, s, mo)
	}
	var seen uint64
	err := s.Run(ctx, func(frames []xsk.Frame, _ []xsk.Verdict) error {
		for _, f := range frames {
			if act == "pcap" {
				if err := pw.write(f.Data); err != nil {
					return err
				}
			} else {
				pc.add(f.Data)
			}
		}
		seen += uint64(len(frames))
		if limit > 0 && seen >= limit {
			return errCountReached
		}
		return nil
	})
	if errors.Is(err, errCountReached) {
		return nil
	}
	return err
}

// pcapOut writes frames from several queues into one capture file.
type pcapOut struct {
	mu sync.Mutex
	f  *os.File
	w  *pcapgo.Writer
}

func newPcapOut(path string) (*pcapOut, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--action pcap: %w", err)
	}
	w := pcapgo.NewWriterNanos(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		f.Close()
		return nil, fmt.Errorf("--action pcap: write %s: %w", path, err)
	}
	return &pcapOut{f: f, w: w}, nil
}

func (p *pcapOut) write(b []byte) error {
	ci := gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: len(b), Length: len(b)}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.w.WritePacket(ci, b); err != nil {
		return fmt.Errorf("write %s: %w", p.f.Name(), err)
	}
	return nil
}

func (p *pcapOut) Close() error { return p.f.Close() }

// printQueues prints one sample per queue, with rates over dt.
func (a *app) printQueues(f *redirectFlags, red *xsk.Redirect, socks []*xsk.Socket, protos []protoCounts, prev map[int]queueSample, dt time.Duration) error {
	qc, err := red.Counters()
	if err != nil {
		return err
	}
	byQueue := map[int]xsk.QueueCounters{}
	for _, c := range qc {
		byQueue[c.Queue] = c
	}
	now := time.Now()
	t := table(a.stdout)
	if !f.jsonOut {
		fmt.Fprintf(t, "%s\tQUEUE\tRX FRAMES\tRATE\tREDIRECTED\tTO STACK\tRING FULL\tFILL EMPTY", now.Format("15:04:05"))
		if f.action == "count" {
			fmt.Fprint(t, "\tTCP\tUDP\tICMP\tOTHER")
		}
		fmt.Fprintln(t)
	}
	for i, s := range socks {
		st, err := s.Stats()
		if err != nil {
			return err
		}
		c := byQueue[s.Queue()]
		q := queueSample{
			Interface: f.iface, Queue: s.Queue(), Time: now.Format(time.RFC3339Nano),
			RxFrames: st.RxFrames, RxBytes: st.RxBytes, TxFrames: st.TxFrames,
			Redirected: c.Redirected.Packets, Passed: c.Passed.Packets, Dropped: c.Dropped.Packets,
			RingFull: st.Kernel.RxRingFull, FillEmpty: st.Kernel.RxFillRingEmptyDescs, KernelDrop: st.Kernel.RxDropped,
			ZeroCopy: s.ZeroCopy(),
		}
		if p, ok := prev[q.Queue]; ok && dt > 0 {
			q.PPS = float64(q.RxFrames-p.RxFrames) / dt.Seconds()
		}
		prev[q.Queue] = q
		if f.jsonOut {
			if err := writeJSONLine(a.stdout, q, true); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(t, "\t%d\t%d\t%s\t%d\t%d\t%d\t%d", q.Queue, q.RxFrames, rate(q.PPS), q.Redirected, q.Passed, q.RingFull, q.FillEmpty)
		if f.action == "count" {
			p := &protos[i]
			fmt.Fprintf(t, "\t%d\t%d\t%d\t%d", p.tcp.Load(), p.udp.Load(), p.icmp.Load(), p.other.Load())
		}
		fmt.Fprintln(t)
	}
	return t.Flush()
}

package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
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
	Redirected uint64  `json:"redirected"` // chosen by a redirect rule or policy, to this queue's socket
	NoSocket   uint64  `json:"no_socket"`  // chosen so, but no socket was bound: to the kernel stack
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
		Long: `redirect hands frames of the selected rx queues to AF_XDP sockets, one per
queue, and runs in the foreground, printing per-queue rates every second,
until --duration, --count or Ctrl-C; then it removes its rules and sockets
and closes everything it made.

It runs on the fast-drop program: its rules are ordinary rules of origin
"redirect" (docs/RULES.md, "Origins"). If xdpdrop drop already runs on the
interface, they join its rules, after them, so a frame the drop rules
match is dropped (or passed) before anything reaches a socket; otherwise
redirect attaches the program itself (pinned, so that a later xdpdrop drop
adds its rules to it) and detaches it on exit unless other rules remain.

--filter takes a rule file (docs/RULES.md): drop, pass and redirect rules
with any fields, queue too. Its rules apply to the selected queues only: a
rule without queue is given them (unless they are all the interface's
queues: then it stays as written), a rule with queue must lie within them.
'policy' sets what happens to the rest of those frames: pass (the default)
leaves them to the interface's rules and policy, redirect or drop takes
them. Without --filter every frame of the selected queues goes to user
space (policy redirect), unless a drop rule takes it first.

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
	fl.StringVar(&f.filter, "filter", "", "rule file choosing which frames of those queues go to user space (docs/RULES.md)")
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

// queueRuns splits queues into runs of consecutive queues, as queue
// fields: 0,1,2,5 -> 0-2, 5.
func queueRuns(queues []int) []fastdrop.PortRange {
	qs := slices.Clone(queues)
	slices.Sort(qs)
	var runs []fastdrop.PortRange
	for _, q := range qs {
		if n := len(runs); n > 0 && int(runs[n-1].Hi)+1 == q {
			runs[n-1].Hi++
			continue
		}
		runs = append(runs, fastdrop.PortRange{Lo: uint16(q), Hi: uint16(q)})
	}
	return runs
}

// redirectRules makes the rules of origin redirect for the selected
// queues: the rules of the file at path (none if ""), each limited to the
// queues, then its policy, unless pass, as a last rule for them (without
// a file: redirect). The error names the line of a rule that reaches past
// the queues.
//
// With every queue of the interface selected (every) the limit would
// exclude nothing, so rules without a queue field are left without one:
// the queue field is one the fast-drop program's plain path does not read,
// and a rule set that uses it takes the full path (bpf/fastdrop.c), which
// would make the trivial filter (every frame to its queue's socket) cost
// what FlowSpec fields cost.
func redirectRules(path string, queues []int, every bool) (*fastdrop.RuleSet, string, error) {
	runs := queueRuns(queues)
	selected := map[int]bool{}
	for _, q := range queues {
		selected[q] = true
	}
	in := &fastdrop.RuleSet{Policy: fastdrop.ActionRedirect}
	if path != "" {
		var err error
		if in, err = fastdrop.ParseFile(path); err != nil {
			return nil, "", err
		}
		if in.Malformed == fastdrop.ActionDrop {
			return nil, "", fmt.Errorf("%s: 'malformed drop' is the interface's verdict, not a redirect filter's: set it with 'xdpdrop drop --iface IF --malformed drop' and leave it out of the filter", path)
		}
	}
	out := &fastdrop.RuleSet{}
	for _, r := range in.Rules {
		if r.Nums == nil || !r.Nums.Queue.IsSet() {
			if every {
				out.Rules = append(out.Rules, r)
				continue
			}
			for _, run := range runs {
				rr := r
				rr.Nums = r.Nums.Clone()
				rr.Nums.Queue = fastdrop.NumRange(uint32(run.Lo), uint32(run.Hi))
				out.Rules = append(out.Rules, rr)
			}
			continue
		}
		for q := 0; q <= fastdrop.MaxQueue; q++ {
			if r.Nums.Queue.Contains(uint32(q)) && !selected[q] {
				return nil, "", fmt.Errorf("%s:%d: %q: queue %d has no socket of this command (--queues %s): add it to --queues, or leave queue out of the rule to mean the selected queues", path, r.Line, r.String(), q, queueList(queues))
			}
		}
		out.Rules = append(out.Rules, r)
	}
	policy := in.EffectivePolicy()
	if policy != fastdrop.ActionPass && every {
		out.Rules = append(out.Rules, fastdrop.Rule{Action: policy})
	} else if policy != fastdrop.ActionPass {
		for _, run := range runs {
			out.Rules = append(out.Rules, fastdrop.Rule{Action: policy, Nums: &fastdrop.Nums{Queue: fastdrop.NumRange(uint32(run.Lo), uint32(run.Hi))}})
		}
	}
	note := fmt.Sprintf("policy %s", policy)
	if path != "" {
		note = fmt.Sprintf("filter %s: %d rules, policy %s", path, len(in.Rules), policy)
	}
	if len(out.Rules) > fastdrop.MaxCompoundRules {
		return nil, "", fmt.Errorf("%s: %d rules for %d runs of queues: more than the %d compound rules one program holds; select fewer runs of queues or write fewer rules", path, len(out.Rules), len(runs), fastdrop.MaxCompoundRules)
	}
	return out, note, nil
}

// allQueues reports whether queues holds every queue of all (the
// interface's), and so needs no limit.
func allQueues(queues, all []int) bool {
	set := map[int]bool{}
	for _, q := range queues {
		set[q] = true
	}
	for _, q := range all {
		if !set[q] {
			return false
		}
	}
	return len(all) > 0
}

// queueList writes queues as --queues takes them: 0-2,5.
func queueList(queues []int) string {
	var parts []string
	for _, r := range queueRuns(queues) {
		parts = append(parts, r.String())
	}
	return strings.Join(parts, ",")
}

// socketOptions are the options of every queue's socket (xsk.OpenQueues
// sets the queue and the shared UMEM).
func (f *redirectFlags) socketOptions() (xsk.Options, error) {
	o := xsk.Options{Interface: f.iface, Batch: f.batch, DisableNeedWakeup: f.noNeedWakeup,
		UMEMOptions: xsk.UMEMOptions{FrameSize: f.frameSize}}
	f.rings.apply(&o)
	// Only l2fwd sends: the other actions' sockets get no TX ring, which
	// in copy mode spares every poll() the kernel's transmit path.
	o.RxOnly = f.action != "l2fwd"
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
	all, err := xsk.AllQueues(f.iface)
	if err != nil {
		return err
	}
	if queues == nil {
		queues = all
	}
	rs, filterNote, err := redirectRules(f.filter, queues, allQueues(queues, all))
	if err != nil {
		return err
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

	red, err := a.startRedirect(f, mode, rs)
	if err != nil {
		return err
	}
	// On the way out (deferred calls run in reverse): the sockets close
	// (their slots empty as they do), then the rules go, and the program
	// too if this command attached it and no other rule is left.
	defer func() { err = errors.Join(err, a.stopRedirect(red, f)) }()

	qs, err := xsk.OpenQueues(xsk.RegisterFunc(red.eng.RegisterSocket), queues, xsk.QueueOptions{Socket: sockOpts, SharedUMEM: f.sharedUMEM})
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
		with := ""
		if red.others > 0 {
			with = fmt.Sprintf(", after the %d rules already there", red.others)
		}
		fmt.Fprintf(a.stdout, "redirecting queues %v of %s (%s mode, %s) to AF_XDP, action %s, %s%s; Ctrl-C stops\n",
			queues, f.iface, red.att.Mode(), zc, f.action, filterNote, with)
		fmt.Fprintf(a.stdout, "each socket: %s\n", describeRings(socks[0].Rings(), f.frameSize))
	}
	if f.metricsAddr != "" {
		col := metrics.NewXSKCollector()
		col.SetProgram(f.iface, queueCounters{red.eng})
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
		if err := a.printQueues(f, red.eng, socks, protos, prev, now.Sub(last)); err != nil {
			cancel()
			wg.Wait()
			return err
		}
		last = now
		// Detached by another process (xdpdrop detach, ip link): the
		// sockets would wait for frames that no longer come.
		if running, err := red.running(a); err == nil && !running {
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
func (a *app) printQueues(f *redirectFlags, eng *fastdrop.Engine, socks []*xsk.Socket, protos []protoCounts, prev map[int]queueSample, dt time.Duration) error {
	var queues []int
	for _, s := range socks {
		queues = append(queues, s.Queue())
	}
	qc, err := eng.QueueCounters(queues...)
	if err != nil {
		return err
	}
	byQueue := map[int]fastdrop.QueueCounter{}
	for _, c := range qc {
		byQueue[c.Queue] = c
	}
	now := time.Now()
	t := table(a.stdout)
	if !f.jsonOut {
		fmt.Fprintf(t, "%s\tQUEUE\tRX FRAMES\tRATE\tREDIRECTED\tNO SOCKET\tRING FULL\tFILL EMPTY", now.Format("15:04:05"))
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
			Redirected: c.Redirected.Packets, NoSocket: c.NoSocket.Packets,
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
		fmt.Fprintf(t, "\t%d\t%d\t%s\t%d\t%d\t%d\t%d", q.Queue, q.RxFrames, rate(q.PPS), q.Redirected, q.NoSocket, q.RingFull, q.FillEmpty)
		if f.action == "count" {
			p := &protos[i]
			fmt.Fprintf(t, "\t%d\t%d\t%d\t%d", p.tcp.Load(), p.udp.Load(), p.icmp.Load(), p.other.Load())
		}
		fmt.Fprintln(t)
	}
	return t.Flush()
}

// redirectRun is what xdpdrop redirect set up on the interface: the
// fast-drop engine its rules are in, and the attachment.
type redirectRun struct {
	iface    string
	att      *loader.Attachment
	eng      *fastdrop.Engine
	attached bool // by this command
	others   int  // rules of other origins when it started
}

// startRedirect puts the rules of rs, origin redirect, into the fast drop
// on the interface, attaching it first (pinned) if none runs there.
func (a *app) startRedirect(f *redirectFlags, mode loader.Mode, rs *fastdrop.RuleSet) (_ *redirectRun, err error) {
	lk, err := a.lockIface(f.iface, f.lockTimeout)
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	r := &redirectRun{iface: f.iface}
	r.att, r.eng, err = a.openDrop(f.iface)
	if errors.Is(err, loader.ErrStale) {
		dir, why, rerr := loader.RemoveStalePins(f.iface, a.pinRoot)
		if rerr != nil {
			return nil, rerr
		}
		if dir != "" {
			fmt.Fprintf(a.stderr, "xdpdrop: removed stale pins %s: %s\n", dir, why)
		}
		r.att, r.eng, err = a.openDrop(f.iface)
	}
	switch {
	case err == nil:
		mine, err := r.eng.OriginRules(fastdrop.OriginRedirect)
		if err == nil && len(mine) > 0 {
			err = fmt.Errorf("another xdpdrop redirect has its %d rules on %s: stop it first (if none runs, remove them with 'xdpdrop rules clear --iface %s --origin redirect')", len(mine), f.iface, f.iface)
		}
		if err == nil {
			var all *fastdrop.RuleSet
			if all, err = r.eng.RuleSet(); err == nil {
				r.others = len(all.Rules)
				err = r.eng.ApplyOrigin(fastdrop.OriginRedirect, rs)
			}
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("redirect on %s: %w", f.iface, err), r.close())
		}
		return r, nil
	case !errors.Is(err, loader.ErrNotPinned):
		return nil, err
	}
	if r.eng, err = fastdrop.New(fastdrop.CapacityFor(rs, 2)); err != nil {
		return nil, err
	}
	if err := r.eng.ApplyOrigin(fastdrop.OriginRedirect, rs); err != nil {
		return nil, errors.Join(err, r.close())
	}
	// Pinned, so that xdpdrop drop (and rules) find the program and add
	// their rules to it while this command runs.
	r.att, err = loader.Attach(r.eng.Program(), loader.Options{
		Interface: f.iface, Mode: mode, Pin: true, PinRoot: a.pinRoot, Maps: r.eng.Maps(),
		Config: map[string]string{"program": programFastdrop, "requested_mode": mode.String(), "attached_by": "redirect"},
	})
	if err != nil {
		return nil, errors.Join(err, r.close())
	}
	r.attached = true
	return r, nil
}

// running reports whether a fast drop still runs on the interface: the
// one this command found or attached, or one that replaced it with bigger
// tables (xdpdrop drop), which keeps the sockets.
func (r *redirectRun) running(a *app) (bool, error) {
	if ok, err := r.att.Running(); err != nil || ok {
		return ok, err
	}
	att, err := loader.Open(r.iface, a.pinRoot)
	if err != nil {
		return false, nil
	}
	defer att.Close()
	if att.Meta().Config["program"] != programFastdrop {
		return false, nil
	}
	return att.Running()
}

// stopRedirect removes this command's rules from the fast drop on the
// interface (opened again: xdpdrop drop may have loaded it anew since)
// and, if this command attached it and no other rule is left, detaches
// it.
func (a *app) stopRedirect(r *redirectRun, f *redirectFlags) error {
	errs := []error{r.close()}
	lk, err := a.lockIface(f.iface, f.lockTimeout)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer lk.Unlock()
	att, eng, err := a.openDrop(f.iface)
	if errors.Is(err, loader.ErrNotPinned) || errors.Is(err, loader.ErrStale) {
		return errors.Join(errs...) // detached by someone else: nothing of ours is left
	}
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer att.Close()
	defer eng.Close()
	if err := eng.ApplyOrigin(fastdrop.OriginRedirect, &fastdrop.RuleSet{}); err != nil {
		return errors.Join(append(errs, fmt.Errorf("remove the redirect rules from %s: %w", f.iface, err))...)
	}
	if !r.attached {
		return errors.Join(errs...)
	}
	rest, err := eng.RuleSet()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if len(rest.Rules) > 0 || rest.EffectivePolicy() != fastdrop.ActionPass || rest.EffectiveMalformed() != fastdrop.ActionPass {
		return errors.Join(errs...) // xdpdrop drop's rules stay in force
	}
	eng.Close()
	att.Close()
	if err := loader.DetachInterface(f.iface, loader.DetachOptions{PinRoot: a.pinRoot}); err != nil && !errors.Is(err, loader.ErrNotAttached) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (r *redirectRun) close() error {
	var errs []error
	if r.eng != nil {
		errs = append(errs, r.eng.Close())
	}
	if r.att != nil {
		errs = append(errs, r.att.Close())
	}
	return errors.Join(errs...)
}

// queueCounters gives the metrics collector the redirect counters of the
// engine, in the shape of the plain redirect program's: what no socket
// took is counted as passed.
type queueCounters struct{ eng *fastdrop.Engine }

func (q queueCounters) Counters() ([]xsk.QueueCounters, error) {
	qc, err := q.eng.QueueCounters()
	if err != nil {
		return nil, err
	}
	out := make([]xsk.QueueCounters, len(qc))
	for i, c := range qc {
		out[i] = xsk.QueueCounters{Queue: c.Queue,
			Redirected: xsk.Counter(c.Redirected), Passed: xsk.Counter(c.NoSocket)}
	}
	return out, nil
}

package benchmark

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/loader"
	"github.com/xdpdrop/xdpdrop/pktgen"
	"github.com/xdpdrop/xdpdrop/xsk"
)

// Addresses and ports of the generated frames: from the peer end to the
// host end, as the sandbox numbers them (RFC 2544's benchmark range).
var (
	srcAddr = netip.MustParseAddr("198.18.0.2")
	dstAddr = netip.MustParseAddr("198.18.0.1")
)

const (
	srcPort = 1024
	dstPort = 9 // discard
	// genBatch is the generator's kernel batch: 256 is its fastest.
	genBatch = 256
)

// counts is a snapshot of every counter a case reads.
type counts struct {
	at time.Time
	// Frames the peer put into the host end's ring (XDP_TX from the
	// generator) and frames the ring had no room for (veth only).
	xmit, xmitFull uint64
	// Frames that reached the measured stage: dropped by the program
	// under test, received by the socket, or arrived at the far end
	// (txonly).
	hook uint64
	// Frames the program under test let through: fast drop's pass
	// verdicts, the redirect program's frames for the stack.
	passed uint64
	// Frames the redirect program handed to the socket.
	redirected uint64
	// XDP_STATISTICS of the socket.
	rxRingFull, rxDropped, txInvalid uint64
	// Frames the socket sent (completions), and the frames its loop gave
	// up on because the TX ring stayed full.
	completed, appTxDropped uint64
	// Frames the sending end dropped on the way to the other (veth: the
	// receiver's ring was full).
	linkTxDropped uint64
	// Frames counted at the other end (l2fwd).
	arrived uint64
	// System calls the socket made: wake-ups for the fill ring (or busy
	// polling), TX kicks, poll().
	syscalls uint64
	// Frames an external application (xdpsock) says it received.
	appRx uint64
}

func (c counts) sub(o counts) counts {
	return counts{
		at:            c.at,
		xmit:          c.xmit - o.xmit,
		xmitFull:      c.xmitFull - o.xmitFull,
		hook:          c.hook - o.hook,
		passed:        c.passed - o.passed,
		redirected:    c.redirected - o.redirected,
		rxRingFull:    c.rxRingFull - o.rxRingFull,
		rxDropped:     c.rxDropped - o.rxDropped,
		txInvalid:     c.txInvalid - o.txInvalid,
		completed:     c.completed - o.completed,
		appTxDropped:  c.appTxDropped - o.appTxDropped,
		linkTxDropped: c.linkTxDropped - o.linkTxDropped,
		arrived:       c.arrived - o.arrived,
		syscalls:      c.syscalls - o.syscalls,
		appRx:         c.appRx - o.appRx,
	}
}

// add sums two deltas.
func (c counts) add(o counts) counts {
	return counts{
		at:            c.at,
		xmit:          c.xmit + o.xmit,
		xmitFull:      c.xmitFull + o.xmitFull,
		hook:          c.hook + o.hook,
		passed:        c.passed + o.passed,
		redirected:    c.redirected + o.redirected,
		rxRingFull:    c.rxRingFull + o.rxRingFull,
		rxDropped:     c.rxDropped + o.rxDropped,
		txInvalid:     c.txInvalid + o.txInvalid,
		completed:     c.completed + o.completed,
		appTxDropped:  c.appTxDropped + o.appTxDropped,
		linkTxDropped: c.linkTxDropped + o.linkTxDropped,
		arrived:       c.arrived + o.arrived,
		syscalls:      c.syscalls + o.syscalls,
		appRx:         c.appRx + o.appRx,
	}
}

// caseRun is one case set up and ready to run.
type caseRun struct {
	c    Case
	opts Options
	env  *env

	job     GenJob  // the generator's job (not txonly)
	running Running // the generator, once started

	// read fills the case's own counters into a snapshot.
	read func(*counts) error

	// app is the AF_XDP loop, run by start on a thread pinned to appCPU.
	app       func(ctx context.Context) error
	appCPU    int
	appCancel context.CancelFunc
	appDone   chan struct{}
	appErr    error

	// ext is the application of an xdpsock row, run by start instead of
	// app.
	ext *external
}

// setup builds the environment of c: interfaces, programs, sockets.
func setup(c Case, opts Options) (r *caseRun, err error) {
	e, err := newEnv(opts.Pair, c)
	if err != nil {
		return nil, err
	}
	r = &caseRun{c: c, opts: opts, env: e}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.close())
		}
	}()
	r.job = GenJob{
		NetNS: e.peerNSName, Interface: e.peer, Ifindex: e.peerIdx, CPU: opts.genCPU(),
		Batch: genBatch, SrcMAC: e.peerMAC, DstMAC: e.hostMAC,
		Src: srcAddr, Dst: dstAddr, SrcPort: srcPort, DstPort: dstPort, Flows: opts.Flows,
	}
	r.job.Frame = buildFrame(r.job, c.FrameSize)
	switch c.Kind {
	case DropTC, DropGeneric, DropNative:
		err = r.setupDrop()
	case DropFast:
		err = r.setupFastDrop()
	case RxDrop, L2Fwd:
		if c.App == AppXDPSock {
			err = r.setupXDPSock()
		} else {
			err = r.setupRx()
		}
	case TxOnly:
		err = r.setupTx()
	}
	return r, err
}

// buildFrame makes the UDP frame of job, size bytes on the wire (with the
// FCS, which the frame itself does not carry).
func buildFrame(job GenJob, size int) []byte {
	s := pktgen.FrameSpec{Src: job.Src, Dst: job.Dst, Proto: pktgen.ProtoUDP, SrcPort: job.SrcPort, DstPort: job.DstPort}
	copy(s.SrcMAC[:], job.SrcMAC)
	copy(s.DstMAC[:], job.DstMAC)
	hdr := len(s.Build().Bytes)
	s.Payload = pktgen.Pattern(max(size-4-hdr, 0))
	return s.Build().Bytes
}

// loadCounter loads the basic programs with xdp_count dropping and
// counting every frame; tc_drop counts into the same slot.
func (r *caseRun) loadCounter() (*gen.BasicObjects, func() (uint64, error), error) {
	spec, err := gen.LoadBasic()
	if err != nil {
		return nil, nil, err
	}
	if err := spec.Variables[gen.BasicVarCountVerdict].Set(uint32(gen.BasicVerdictVERDICT_DROP)); err != nil {
		return nil, nil, err
	}
	var objs gen.BasicObjects
	if err := loader.Load(spec, &objs, nil); err != nil {
		return nil, nil, err
	}
	r.env.onClose(objs.Close)
	read := func() (uint64, error) {
		var per []gen.BasicCounter
		if err := objs.Verdicts.Lookup(uint32(gen.BasicVerdictVERDICT_DROP), &per); err != nil {
			return 0, fmt.Errorf("read drop counter: %w", err)
		}
		var n uint64
		for _, c := range per {
			n += c.Packets
		}
		return n, nil
	}
	return &objs, read, nil
}

// attach runs att (a loader.Attach) in the host's namespace, or in the
// peer's, and detaches what it attached when the case ends.
func (r *caseRun) attach(att func() (*loader.Attachment, error), peer bool) error {
	var a *loader.Attachment
	var err error
	if peer {
		err = r.env.inPeer(func() error { a, err = att(); return err })
	} else {
		a, err = att()
	}
	if err != nil {
		return err
	}
	r.env.onClose(a.Close)
	return nil
}

// attachPeerCounter attaches the counting program to the peer end, where
// l2fwd's frames come back.
func (r *caseRun) attachPeerCounter(objs *gen.BasicObjects) error {
	if err := r.attach(func() (*loader.Attachment, error) {
		return loader.Attach(objs.XdpCount, loader.Options{Interface: r.env.peer, Mode: loader.ModeDriver,
			Config: map[string]string{"program": "count", "benchmark": "true"}})
	}, true); err != nil {
		return fmt.Errorf("count the frames l2fwd sends back at %s: %w", r.env.peer, err)
	}
	return nil
}

func (r *caseRun) setupDrop() error {
	objs, read, err := r.loadCounter()
	if err != nil {
		return err
	}
	config := map[string]string{"program": string(r.c.Kind), "benchmark": "true"}
	switch r.c.Kind {
	case DropTC:
		a, err := loader.AttachTC(objs.TcDrop, loader.TCOptions{Interface: r.env.host})
		if err != nil {
			return err
		}
		r.env.onClose(a.Close)
	case DropGeneric, DropNative:
		mode := loader.ModeDriver
		if r.c.Kind == DropGeneric {
			mode = loader.ModeGeneric
		}
		if err := r.attach(func() (*loader.Attachment, error) {
			return loader.Attach(objs.XdpCount, loader.Options{Interface: r.env.host, Mode: mode, Config: config})
		}, false); err != nil {
			return err
		}
	}
	r.read = func(c *counts) error {
		var err error
		c.hook, err = read()
		return err
	}
	return nil
}

func (r *caseRun) setupFastDrop() error {
	rs := blocklist(r.c.Rules)
	eng, err := fastdrop.New(fastdrop.CapacityFor(rs, 1))
	if err != nil {
		return err
	}
	r.env.onClose(eng.Close)
	if err := eng.Apply(rs); err != nil {
		return err
	}
	if err := r.attach(func() (*loader.Attachment, error) {
		return loader.Attach(eng.Program(), loader.Options{Interface: r.env.host, Mode: loader.ModeDriver,
			Config: map[string]string{"program": "fastdrop", "benchmark": "true", "rules": fmt.Sprint(len(rs.Rules))}})
	}, false); err != nil {
		return err
	}
	r.read = func(c *counts) error {
		n, err := eng.Counters()
		if err != nil {
			return err
		}
		c.hook, c.passed = n.Drop.Packets, n.Pass.Packets
		return nil
	}
	return nil
}

// socketOptions are the options of the case's AF_XDP socket.
func (r *caseRun) socketOptions(ifindex int) xsk.Options {
	o := xsk.Options{
		Ifindex: ifindex, Queue: 0,
		DisableNeedWakeup: !r.c.NeedWakeup,
		Wait:              r.opts.Wait,
		Batch:             r.opts.Batch,
	}
	if r.c.BusyPollBudget > 0 {
		o.BusyPoll = xsk.BusyPoll{Enable: true, Budget: r.c.BusyPollBudget}
	}
	return o
}

// setupRx prepares rxdrop and l2fwd: the redirect program on the host
// end, one socket on its queue 0, and for l2fwd a counter of the frames
// coming back at the peer.
func (r *caseRun) setupRx() error {
	var err error
	if r.appCPU, err = r.opts.appCPU(r.c.Placement); err != nil {
		return err
	}
	red, err := xsk.NewRedirect(xsk.RedirectOptions{Queues: []int{0}})
	if err != nil {
		return err
	}
	r.env.onClose(red.Close)
	if err := r.attach(func() (*loader.Attachment, error) {
		return loader.Attach(red.Program(), loader.Options{Interface: r.env.host, Mode: loader.ModeDriver,
			Config: map[string]string{"program": "redirect", "benchmark": "true"}})
	}, false); err != nil {
		return err
	}
	if r.c.BusyPollBudget > 0 {
		prev, err := xsk.SetNAPIDefer(r.env.host, xsk.RecommendedNAPIDefer())
		if err != nil {
			return err
		}
		r.env.onClose(func() error { _, err := xsk.SetNAPIDefer(r.env.host, prev); return err })
	}
	so := r.socketOptions(r.env.hostIdx)
	// rxdrop sends nothing: no TX ring, as xdpsock's rxdrop opens it.
	so.RxOnly = r.c.Kind != L2Fwd
	qs, err := xsk.OpenQueues(red, []int{0}, xsk.QueueOptions{Socket: so})
	if err != nil {
		return err
	}
	r.env.onClose(qs.Close)
	s := qs.Sockets[0]
	arrived, err := r.l2fwdArrivals()
	if err != nil {
		return err
	}
	if r.c.Kind == L2Fwd {
		r.app = func(ctx context.Context) error {
			return errors.Join(xsk.L2Fwd(ctx, s, xsk.ModeOptions{}), drainTX(s))
		}
	} else {
		r.app = func(ctx context.Context) error { return xsk.RxDrop(ctx, s, xsk.ModeOptions{}) }
	}
	r.read = func(c *counts) error {
		qc, err := red.Counters()
		if err != nil {
			return err
		}
		var q xsk.QueueCounters
		for _, x := range qc {
			if x.Queue == 0 {
				q = x
			}
		}
		// Frames on other queues (a multi-queue pair) go to the stack.
		for _, x := range qc {
			if x.Queue != 0 {
				c.passed += x.Passed.Packets + x.Redirected.Packets + x.Dropped.Packets
			}
		}
		c.passed += q.Passed.Packets + q.Dropped.Packets + q.Aborted.Packets
		c.redirected = q.Redirected.Packets
		st, err := s.Stats()
		if err != nil {
			return err
		}
		c.hook = st.RxFrames
		c.rxRingFull, c.rxDropped, c.txInvalid = st.Kernel.RxRingFull, st.Kernel.RxDropped, st.Kernel.TxInvalidDescs
		c.completed, c.appTxDropped = st.Completed, st.TxDropped
		c.syscalls = st.RxWakeups + st.TxKicks + st.Polls
		if arrived != nil {
			return arrived(c)
		}
		return nil
	}
	return nil
}

// l2fwdArrivals is, for l2fwd, what counts the frames that come back to
// the peer end: it attaches a counter there and returns how to read it,
// with the link's drops, into counts. nil for the other kinds.
func (r *caseRun) l2fwdArrivals() (func(*counts) error, error) {
	if r.c.Kind != L2Fwd {
		return nil, nil
	}
	objs, read, err := r.loadCounter()
	if err != nil {
		return nil, err
	}
	if err := r.attachPeerCounter(objs); err != nil {
		return nil, err
	}
	return func(c *counts) error {
		var err error
		if c.arrived, err = read(); err != nil {
			return err
		}
		c.linkTxDropped, err = r.env.txDropped(false)
		return err
	}, nil
}

// setupTx prepares txonly: the socket sends from the peer end into the
// host end, where a native program counts what arrives. On two cores the
// host end's NAPI runs in a kernel thread on the generator's CPU, so that
// the receive work leaves the sender's core (veth would run it there).
func (r *caseRun) setupTx() error {
	var err error
	if r.appCPU, err = r.opts.appCPU(r.c.Placement); err != nil {
		return err
	}
	objs, read, err := r.loadCounter()
	if err != nil {
		return err
	}
	if err := r.attach(func() (*loader.Attachment, error) {
		return loader.Attach(objs.XdpCount, loader.Options{Interface: r.env.host, Mode: loader.ModeDriver,
			Config: map[string]string{"program": "count", "benchmark": "true"}})
	}, false); err != nil {
		return err
	}
	if r.c.Placement == TwoCores {
		if err := r.env.threadedNAPI(r.opts.genCPU()); err != nil {
			return err
		}
	}
	var s *xsk.Socket
	if err := r.env.inPeer(func() error {
		var err error
		s, err = xsk.Open(r.socketOptions(r.env.peerIdx))
		return err
	}); err != nil {
		return err
	}
	r.env.onClose(s.Close)
	frame := r.job.Frame
	r.app = func(ctx context.Context) error {
		return errors.Join(xsk.TxOnly(ctx, s, frame, xsk.ModeOptions{}), drainTX(s))
	}
	r.read = func(c *counts) error {
		var err error
		if c.hook, err = read(); err != nil {
			return err
		}
		st, err := s.Stats()
		if err != nil {
			return err
		}
		c.completed, c.txInvalid = st.Completed, st.Kernel.TxInvalidDescs
		c.syscalls = st.RxWakeups + st.TxKicks + st.Polls
		c.linkTxDropped, err = r.env.txDropped(true)
		return err
	}
	return nil
}

// drainTX collects the completions of the frames still out for
// transmission when a loop stopped, so that the counts balance.
func drainTX(s *xsk.Socket) error {
	for range 100 {
		if s.Accounting().TX == 0 {
			return nil
		}
		if _, err := s.Complete(); err != nil {
			if errors.Is(err, xsk.ErrClosed) {
				return nil
			}
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// start starts the application and the generator.
func (r *caseRun) start() error {
	if r.app != nil {
		ctx, cancel := context.WithCancel(context.Background())
		r.appCancel, r.appDone = cancel, make(chan struct{})
		started := make(chan error, 1)
		go func() {
			defer close(r.appDone)
			// The thread's affinity is never given back: it ends with
			// this goroutine.
			runtime.LockOSThread()
			if err := pinThread(r.appCPU); err != nil {
				started <- err
				return
			}
			started <- nil
			r.appErr = r.app(ctx)
		}()
		if err := <-started; err != nil {
			cancel()
			<-r.appDone
			return fmt.Errorf("application: %w", err)
		}
	}
	if r.ext != nil {
		if err := r.startExternal(); err != nil {
			return err
		}
	}
	if r.c.Kind != TxOnly {
		running, err := r.opts.Generator.Start(r.job)
		if err != nil {
			return err
		}
		r.running = running
	}
	return r.flowing()
}

// flowing waits until traffic flows: a generator in another process takes
// a moment to start, and the warm-up starts when frames do.
func (r *caseRun) flowing() error {
	first, err := r.snapshot()
	if err != nil {
		return err
	}
	moved := func(c counts) bool {
		d := c.sub(first)
		if o, ok := offeredIn(r.c, r.env.veth, d); ok {
			return o > 0
		}
		return d.hook > 0 || d.passed > 0
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		c, err := r.snapshot()
		if err != nil {
			return err
		}
		if moved(c) {
			return nil
		}
		if r.running != nil {
			select {
			case <-r.running.Done():
				if err := r.running.Stop(); err != nil {
					return err
				}
				return errors.New("the generator stopped by itself")
			default:
			}
		}
		if r.appDone != nil {
			select {
			case <-r.appDone:
				if r.appErr != nil {
					return fmt.Errorf("application: %w", r.appErr)
				}
				return errors.New("the application stopped by itself")
			default:
			}
		}
		if r.ext != nil {
			select {
			case <-r.ext.running.Done():
				return errors.Join(errors.New("the application stopped by itself"), r.stopExternal())
			default:
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return errors.New("no traffic within 10s of starting it")
}

// wait lets the case run for d, or until it fails or ctx ends.
func (r *caseRun) wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	var genDone, appDone, extDone <-chan struct{}
	if r.running != nil {
		genDone = r.running.Done()
	}
	if r.appDone != nil {
		appDone = r.appDone
	}
	if r.ext != nil && r.ext.running != nil {
		extDone = r.ext.running.Done()
	}
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-genDone:
		if err := r.running.Stop(); err != nil {
			return err
		}
		return errors.New("the generator stopped by itself")
	case <-appDone:
		if r.appErr != nil {
			return fmt.Errorf("application: %w", r.appErr)
		}
		return errors.New("the application stopped by itself")
	case <-extDone:
		return errors.Join(errors.New("the application stopped by itself"), r.stopExternal())
	}
}

// stop stops the traffic and lets the rings drain, so that a last
// snapshot accounts for every frame.
func (r *caseRun) stop() error {
	var errs []error
	if r.running != nil {
		errs = append(errs, r.running.Stop())
		r.running = nil
		// The application takes what is still in the rings.
		errs = append(errs, r.settle())
	}
	if r.appCancel != nil {
		r.appCancel()
		<-r.appDone
		r.appCancel = nil
		if r.appErr != nil {
			errs = append(errs, fmt.Errorf("application: %w", r.appErr))
		}
		errs = append(errs, r.settle())
	}
	if r.ext != nil && r.ext.running != nil {
		errs = append(errs, r.stopExternal(), r.settle())
	}
	return errors.Join(errs...)
}

// cpu reads where the machine's CPU time went, counting the case's own
// tasks apart.
func (r *caseRun) cpu() cpuTicks {
	pids := slices.Clip(r.env.kernelPids)
	for _, run := range []Running{r.running, r.extRunning()} {
		if run == nil {
			continue
		}
		if p, ok := pidOf(run); ok {
			pids = append(pids, strconv.Itoa(p))
		}
	}
	return readCPUTicks(pids, r.opts.genCPU())
}

func (r *caseRun) extRunning() Running {
	if r.ext == nil || r.ext.running == nil {
		return nil
	}
	return r.ext.running
}

// settle waits until the counters stop moving and the socket has read
// what its RX ring holds (at most two seconds: a loaded machine may leave
// the application off its CPU for a while).
func (r *caseRun) settle() error {
	prev, err := r.snapshot()
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		cur, err := r.snapshot()
		if err != nil {
			return err
		}
		// A busy-polling application keeps making system calls.
		d := cur.sub(prev)
		d.syscalls = 0
		if d == (counts{at: cur.at}) && cur.onRing() == 0 {
			return nil
		}
		prev = cur
	}
	return nil
}

// onRing is how many frames the redirect program handed to the socket
// that it has not read (nor the kernel dropped): they wait on the RX ring.
func (c counts) onRing() uint64 {
	if done := c.hook + c.rxRingFull + c.rxDropped; c.redirected > done {
		return c.redirected - done
	}
	return 0
}

// snapshot reads every counter of the case.
func (r *caseRun) snapshot() (counts, error) {
	var c counts
	if r.env.veth && r.c.Kind != TxOnly {
		var err error
		if c.xmit, c.xmitFull, err = r.env.offered(); err != nil {
			return c, err
		}
	}
	if err := r.read(&c); err != nil {
		return c, err
	}
	c.at = time.Now()
	return c, nil
}

// rateOf is the count that makes a row's Mpps.
func rateOf(c Case, d counts) uint64 {
	if c.Kind == L2Fwd {
		return d.arrived
	}
	return d.hook
}

// offeredIn is what was offered to the measured stage, if known: what
// the generator put into a veth's ring, or what the txonly socket sent.
func offeredIn(c Case, veth bool, d counts) (uint64, bool) {
	if c.Kind == TxOnly {
		return d.completed, true
	}
	if !veth {
		return 0, false
	}
	return d.xmit + d.xmitFull, true
}

// account fills the totals of res from the counts of whole runs.
func account(c Case, veth bool, res *Result, d counts) {
	lose := func(c Cause, n uint64) {
		if n > 0 {
			res.Lost = append(res.Lost, Loss{Cause: c, Where: c.Describe(), Frames: n})
		}
	}
	sent, known := offeredIn(c, veth, d)
	res.Sent, res.Received = sent, d.hook
	if c.App == AppXDPSock {
		res.AppReceived = d.appRx
	}
	if c.Kind.IsAFXDP() {
		// Per frame the socket handled: received, or sent (txonly).
		n := d.hook
		switch {
		case c.Kind == TxOnly:
			n = d.completed
		case c.App == AppXDPSock:
			n = d.appRx // what its system call counts go with
		}
		if n > 0 {
			res.SyscallsPerFrame = float64(d.syscalls) / float64(n)
		}
	}
	out := d.hook
	if c.Kind != TxOnly {
		lose(LossVethRingFull, d.xmitFull)
	}
	switch c.Kind {
	case DropFast:
		lose(LossPassed, d.passed)
	case RxDrop, L2Fwd:
		lose(LossToStack, d.passed)
		lose(LossRxRingFull, d.rxRingFull)
		lose(LossRxDropped, d.rxDropped)
		lose(LossLeftOnRing, d.onRing())
	}
	switch c.Kind {
	case L2Fwd:
		res.Forwarded, out = d.arrived, d.arrived
		lose(LossAppTxDropped, d.appTxDropped)
		lose(LossTxInvalid, d.txInvalid)
		lose(LossVethTxDropped, d.linkTxDropped)
		if sentBack := d.completed + d.appTxDropped; d.hook > sentBack {
			lose(LossNotSentBack, d.hook-sentBack)
		}
	case TxOnly:
		lose(LossTxInvalid, d.txInvalid)
		lose(LossVethTxDropped, d.linkTxDropped)
	}
	if known {
		res.Unaccounted = int64(sent) - int64(out) - int64(res.LostTotal())
	}
}

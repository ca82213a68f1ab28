package benchmark

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/loader"
	"github.com/xdpdrop/xdpdrop/xsk"
)

// Options shape a Run. DefaultOptions returns the ones `xdpdrop bench`
// uses; zero fields of other Options get the same defaults, except Wait.
type Options struct {
	// Warmup runs a case before each of its measured windows
	// (default 1s).
	Warmup time.Duration
	// Duration of each measured window (default 2s).
	Duration time.Duration
	// Repeat is how many windows measure each case, one per pass over
	// all the cases (default 3).
	Repeat int
	// CPUs are the CPU the generator runs on, which on veth also does the
	// kernel's receive work, and the other CPU of two-core cases
	// (default [0 1]).
	CPUs []int
	// Flows > 1 varies the source address and port of the generated
	// frames over this many values (default 1).
	Flows uint32
	// Wait is how the AF_XDP loops wait for frames. The zero value is
	// xsk's default (WaitAdaptive); DefaultOptions has WaitSpin, the busy
	// loop of the kernel's xdpsock.
	Wait xsk.WaitMode
	// Batch is the AF_XDP batch size (default 64).
	Batch int
	// XDPSock is the path of an xdpsock binary (the kernel's AF_XDP
	// sample, from bpf-examples) that runs the rows whose App is
	// AppXDPSock. Nothing here builds or ships it.
	XDPSock string
	// Pair measures on these interfaces instead of a fresh veth pair
	// per case.
	Pair *Pair
	// Generator sends the traffic (default InProcess()).
	Generator Generator
	// Progress, if set, is told what Run is doing, from Run's goroutine.
	Progress func(Event)
}

// DefaultOptions are the options of `xdpdrop bench` (with its generator
// in another process, see Command): a full standard plan takes a few
// minutes.
func DefaultOptions() Options {
	return Options{
		Warmup: time.Second, Duration: 2 * time.Second, Repeat: 3,
		CPUs: []int{0, 1}, Flows: 1, Wait: xsk.WaitSpin, Batch: xsk.DefaultBatch,
		Generator: InProcess(),
	}
}

// QuickOptions are DefaultOptions for a fast look (`xdpdrop bench
// --quick`): a short warm-up and one short repeat per case.
func QuickOptions() Options {
	o := DefaultOptions()
	o.Warmup, o.Duration, o.Repeat = 500*time.Millisecond, 500*time.Millisecond, 1
	return o
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Warmup == 0 {
		o.Warmup = d.Warmup
	}
	if o.Duration == 0 {
		o.Duration = d.Duration
	}
	if o.Repeat == 0 {
		o.Repeat = d.Repeat
	}
	if len(o.CPUs) == 0 {
		o.CPUs = d.CPUs
	}
	if o.Flows == 0 {
		o.Flows = d.Flows
	}
	if o.Batch == 0 {
		o.Batch = d.Batch
	}
	if o.Generator == nil {
		o.Generator = d.Generator
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Warmup < 0:
		return fmt.Errorf("benchmark: warm-up %s: must not be negative", o.Warmup)
	case o.Duration < 10*time.Millisecond:
		return fmt.Errorf("benchmark: duration %s: want at least 10ms", o.Duration)
	case o.Repeat < 1:
		return fmt.Errorf("benchmark: repeat %d: want at least 1", o.Repeat)
	case len(o.CPUs) > 2:
		return fmt.Errorf("benchmark: CPUs %v: want one or two", o.CPUs)
	case o.Flows > 65536:
		return fmt.Errorf("benchmark: flows %d: want 1 to 65536", o.Flows)
	case o.Batch < 1 || o.Batch > xsk.MaxBatch:
		return fmt.Errorf("benchmark: batch %d: want 1 to %d", o.Batch, xsk.MaxBatch)
	}
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return fmt.Errorf("benchmark: read CPU affinity: %w", err)
	}
	for _, c := range o.CPUs {
		if c < 0 || c >= 1024 || !allowed.IsSet(c) {
			return fmt.Errorf("benchmark: CPU %d is not one this process may run on", c)
		}
	}
	if len(o.CPUs) == 2 && o.CPUs[0] == o.CPUs[1] {
		return fmt.Errorf("benchmark: CPUs %v: want two different CPUs", o.CPUs)
	}
	return nil
}

// genCPU is where the generator and the kernel's receive work run.
func (o Options) genCPU() int { return o.CPUs[0] }

// appCPU is where the application of an AF_XDP case runs.
func (o Options) appCPU(p Placement) (int, error) {
	if p == TwoCores {
		if len(o.CPUs) < 2 {
			return 0, errors.New("two-core cases need a second CPU: name two CPUs")
		}
		return o.CPUs[1], nil
	}
	return o.CPUs[0], nil
}

// Event is what Run reports to Options.Progress.
type Event struct {
	Index, Total int // the case's position in the plan, from 0
	Case         Case
	// Stage is "setup", "warmup" and "repeat" (Mpps set) in each pass
	// (Repeat, from 0), then "done" (Result set) for every case once the
	// passes are over.
	Stage  string
	Repeat int
	Mpps   float64
	Result *Result
	// Host, Peer and PeerNetNS name the interfaces of the case (from
	// "warmup" on): a sandbox's are removed when the case ends.
	Host, Peer, PeerNetNS string
}

// Run measures the cases and returns the report. It makes Options.Repeat
// passes over them: each pass sets every case up, warms it up, measures
// one window of Options.Duration and tears it down again, so that a
// disturbance of the machine (other work) hits one repeat of several
// rows rather than every repeat of one, and the median leaves it out.
// A case listed twice (in two tables) is measured once and reported
// twice.
//
// A case that fails is reported with its Error and the run goes on. When
// ctx ends, Run cleans up the case in progress and returns the rows with
// at least one repeat, with ctx's error.
func Run(ctx context.Context, cases []Case, opts Options) (*Report, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	for _, c := range cases {
		if err := c.Validate(); err != nil {
			return nil, err
		}
		if c.App == AppXDPSock {
			if err := checkExecutable(opts.XDPSock); err != nil {
				return nil, fmt.Errorf("benchmark: %s: %w", c.Name(), err)
			}
			if opts.Pair != nil {
				// xdpsock detaches its program only when it ends by
				// itself; one that must be killed (in poll mode it
				// sees SIGINT only when a frame arrives) leaves it
				// attached, which only a sandbox's removal undoes.
				return nil, fmt.Errorf("benchmark: %s: xdpsock rows run on sandbox pairs only, not on %s/%s", c.Name(), opts.Pair.Host, opts.Pair.Peer)
			}
		}
	}
	start := time.Now()
	rep := &Report{
		Machine:  DescribeMachine(),
		Settings: settingsOf(opts),
		Started:  start.UTC(),
		LoadAvg:  loadAvg(),
		Notes:    notes(opts),
	}
	rows := map[string]*row{}
	var order []*row // measured rows, in plan order
	for i, c := range cases {
		if _, ok := rows[c.key()]; !ok {
			r := &row{index: i, c: c}
			rows[c.key()] = r
			order = append(order, r)
		}
	}
	var err error
passes:
	for pass := range opts.Repeat {
		for _, r := range order {
			if r.err != "" {
				continue
			}
			serr := r.measure(ctx, pass, len(cases), opts)
			if ctx.Err() != nil {
				err = ctx.Err()
				break passes // the interrupted window is not counted
			}
			if errors.Is(serr, unix.EPERM) || errors.Is(serr, loader.ErrNotPermitted) {
				// Every other case would fail the same way.
				err = fmt.Errorf("%s: %w (bench needs root: CAP_NET_ADMIN, CAP_SYS_ADMIN and CAP_BPF)", r.c.Name(), serr)
				break passes
			}
		}
	}
	if err != nil && !errors.Is(err, ctx.Err()) {
		rep.Seconds = time.Since(start).Seconds()
		rep.LoadAvgEnd = loadAvg()
		return rep, err
	}
	for i, c := range cases {
		r := rows[c.key()]
		if r.err == "" && len(r.samples) == 0 {
			continue // interrupted before its first window
		}
		res := r.result()
		res.Case = c
		rep.Results = append(rep.Results, res)
		opts.progress(Event{Index: i, Total: len(cases), Case: c, Stage: "done", Result: &res})
	}
	var worst float64
	for _, r := range rep.Results {
		worst = max(worst, r.OtherCPUPct, r.StealPct)
	}
	if worst > 10 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("Other work (or other guests) took up to %.0f%% of the CPUs during some rows: "+
			"those rows (other CPU, steal) are disturbed.", worst))
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.LoadAvgEnd = loadAvg()
	return rep, err
}

// row gathers the passes over one case.
type row struct {
	index   int // of its first listing in the plan
	c       Case
	veth    bool
	samples []float64
	offered []float64
	other   []float64 // per window: CPU time other work used, percent
	steal   []float64 // per window: CPU time the hypervisor took, percent
	genIdle []float64 // per window: idle share of the generator's CPU, percent
	total   counts    // from the start of the traffic to its end, summed over passes
	err     string
}

// result summarizes the row.
func (r *row) result() Result {
	res := Result{Case: r.c, Name: r.c.Name(), Lost: []Loss{}}
	if r.err != "" {
		res.Error = r.err
		return res
	}
	res.Samples = slices.Clone(r.samples)
	res.Mpps = Summarize(r.samples)
	res.OfferedMpps = Summarize(r.offered)
	res.OtherCPUPct = Summarize(r.other).Max
	res.StealPct = Summarize(r.steal).Max
	account(r.c, r.veth, &res, r.total)
	if len(r.genIdle) > 0 {
		idle := Summarize(r.genIdle).Median
		res.GeneratorIdlePct = &idle
	}
	if res.OfferedMpps.Median > 0 && res.Mpps.Median >= 0.98*res.OfferedMpps.Median {
		if r.c.Kind == TxOnly {
			// The sender is the socket under test.
			res.Note = "kept up with the sender"
		} else {
			res.GeneratorBound = true
			res.Note = "generator-bound: took all the generator offered, so the rate is the generator's"
		}
	}
	return res
}

func (o Options) progress(e Event) {
	if o.Progress != nil {
		o.Progress(e)
	}
}

// checkExecutable says why path cannot run an xdpsock row.
func checkExecutable(path string) error {
	if path == "" {
		return errors.New("xdpsock rows need the path of an xdpsock binary")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("xdpsock binary: %w", err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("xdpsock binary %s is not an executable file", path)
	}
	return nil
}

func settingsOf(o Options) Settings {
	s := Settings{
		WarmupSeconds: o.Warmup.Seconds(), DurationSeconds: o.Duration.Seconds(), Repeat: o.Repeat,
		CPUs: slices.Clone(o.CPUs), Flows: o.Flows, Wait: o.Wait.String(), Batch: o.Batch,
		Generator: o.Generator.String(), Interfaces: "sandbox", XDPSock: o.XDPSock,
	}
	if o.Pair != nil {
		s.Interfaces = o.Pair.Host + "/" + o.Pair.Peer
	}
	return s
}

// notes explain where the work runs; they hold for every row.
func notes(o Options) []string {
	var n []string
	gen := fmt.Sprintf("The generator runs on CPU %d", o.genCPU())
	if o.Pair == nil {
		gen += ", and so does the kernel's receive work for the veth end under test: veth runs it in the sender's context (there are no hardware queues or interrupts). " +
			"A row that kept up with the sender measures both together on that CPU"
	}
	n = append(n, gen+".")
	if len(o.CPUs) == 2 {
		n = append(n, fmt.Sprintf("AF_XDP applications run on CPU %d (one-core rows, sharing it with the generator) or CPU %d (two-core rows). "+
			"txonly sends from the peer end; on two cores the receiving end's NAPI runs in a kernel thread pinned to CPU %d (threaded NAPI).",
			o.CPUs[0], o.CPUs[1], o.CPUs[0]))
	}
	if m := DescribeMachine(); m.CPUs <= 2 {
		n = append(n, fmt.Sprintf("This machine has %d CPUs: the generator, the kernel and the application share them, so no row measures a CPU of its own.", m.CPUs))
	}
	return n
}

// measure sets the case up, warms it up, measures one window and tears
// it down, adding what it saw to the row. A failure is recorded in the
// row; the error returned is the setup's.
func (w *row) measure(ctx context.Context, pass, total int, opts Options) error {
	ev := func(stage string) Event {
		return Event{Index: w.index, Total: total, Case: w.c, Stage: stage, Repeat: pass}
	}
	opts.progress(ev("setup"))
	r, err := setup(w.c, opts)
	if err != nil {
		w.err = err.Error()
		return err
	}
	w.veth = r.env.veth
	fail := func(err error) error {
		_ = r.stop()
		if ctx.Err() == nil {
			w.err = err.Error()
		}
		return nil
	}
	defer func() {
		if err := r.env.close(); err != nil && w.err == "" {
			w.err = fmt.Sprintf("clean up: %v", err)
		}
	}()

	first, err := r.snapshot()
	if err != nil {
		return fail(err)
	}
	if err := r.start(); err != nil {
		return fail(err)
	}
	e := ev("warmup")
	e.Host, e.Peer, e.PeerNetNS = r.env.host, r.env.peer, r.env.peerNSName
	opts.progress(e)
	if err := r.wait(ctx, opts.Warmup); err != nil {
		return fail(err)
	}
	cpu0 := r.cpu()
	prev, err := r.snapshot()
	if err != nil {
		return fail(err)
	}
	if err := r.wait(ctx, opts.Duration); err != nil {
		return fail(err)
	}
	cur, err := r.snapshot()
	if err != nil {
		return fail(err)
	}
	cpu := r.cpu().sub(cpu0)
	if err := r.stop(); err != nil {
		return fail(err)
	}
	last, err := r.snapshot()
	if err != nil {
		return fail(err)
	}
	d := cur.sub(prev)
	secs := cur.at.Sub(prev.at).Seconds()
	mpps := float64(rateOf(w.c, d)) / secs / 1e6
	w.samples = append(w.samples, mpps)
	if o, ok := offeredIn(w.c, w.veth, d); ok {
		w.offered = append(w.offered, float64(o)/secs/1e6)
	}
	w.total = w.total.add(last.sub(first))
	w.other = append(w.other, cpu.otherPct())
	w.steal = append(w.steal, cpu.stealPct())
	if idle := cpu.genIdlePct(); w.c.Kind != TxOnly && idle >= 0 {
		w.genIdle = append(w.genIdle, idle)
	}
	e = ev("repeat")
	e.Mpps = mpps
	opts.progress(e)
	return nil
}

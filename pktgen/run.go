package pktgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// RunOptions bound a Run: it stops at Count frames, after Duration, or when
// the context ends, whichever comes first. Zero Count and Duration with a
// context that never ends is refused: a generator must stop by itself.
type RunOptions struct {
	Count    uint64        // frames to send, 0 = no limit
	Duration time.Duration // how long to send, 0 = no limit
	Rate     uint64        // frames per second, 0 = as fast as possible
	Batch    uint32        // frames per kernel batch (0 = 64)

	// InFlight is how many live-frames calls Run keeps in the kernel at
	// once, each from a thread of its own (at most MaxInFlight; default
	// 1 with a holding run, else 2). The threads run in the caller's
	// network namespace, all on one CPU: the calling thread's, if it may
	// run on one only, else the one it runs on when Run starts.
	//
	// Why: every test run with more than one repeat adds its program to
	// the kernel's XDP dispatcher when it starts and removes it when it
	// ends, and each change waits for an RCU grace period (two per
	// call, 10-30 ms on a loaded VM). While another call of the same
	// program is still running, the program stays in the dispatcher and
	// neither wait happens: with two calls in flight, started half a
	// call apart, the generator never sleeps. The holding run (Hold)
	// does the same without a second sending thread.
	InFlight int
	// Hold says whether a holding run keeps the program in the
	// dispatcher (default HoldAuto: when Rate is 0). See Hold.
	Hold Hold
	// CallTime is how long each call should run (default
	// DefaultCallTime, or DefaultPacedCallTime with a Rate): Run sizes
	// the repeats of each call from the rate the previous ones reached.
	// Each call takes the kernel's dispatcher lock twice, for which it
	// may wait while another process's test run waits for a grace
	// period, and without a holding run a call alone waits for two
	// grace periods itself: longer calls amortize both. A stop (the
	// context, the deadline) does not wait for a call to end: Run
	// interrupts the calls in progress with a signal, and counts their
	// frames from the program's own counter. Paced, each call sends
	// CallTime's worth of frames at once and then waits until they are
	// due.
	CallTime time.Duration
	// Chunk, if set, sends exactly this many frames per call instead of
	// sizing calls by CallTime (the fixed chunking older versions used,
	// 65536, to compare against).
	Chunk uint64

	// Progress, if set, is called about every Interval with the totals so
	// far, from the goroutine that called Run.
	Progress func(Stats)
	Interval time.Duration // default 1s
}

// Defaults of RunOptions.
const (
	DefaultInFlight      = 1 // with a holding run; 2 without
	MaxInFlight          = 16
	DefaultCallTime      = time.Second
	DefaultPacedCallTime = 50 * time.Millisecond
	// MinCallTime and MaxCallTime bound CallTime: shorter calls cost more
	// in system calls and dispatcher changes than they send, longer ones
	// hold a stop back for too long.
	MinCallTime = time.Millisecond
	MaxCallTime = 10 * time.Second
	// firstChunk is the size of the first call, before any rate is known.
	firstChunk = 65536
	// minChunk keeps the system call's cost small next to the frames.
	minChunk = 1024
	// maxChunk bounds a call whatever the rate estimate says (the kernel
	// takes a u32 repeat count).
	maxChunk = 1 << 28
)

// Stats describe a Run so far.
type Stats struct {
	Sent    uint64
	Elapsed time.Duration
	// Calls is how many live-frames calls completed.
	Calls uint64
	// CPU is the time the sending threads ran on a CPU, Runnable the time
	// they were ready to but another task had the CPU, InFlight their
	// number. See BusyShare and IdleShare.
	CPU      time.Duration
	Runnable time.Duration
	InFlight int
	// CPUs is how many CPUs the sending threads could run on.
	CPUs int
	// Held reports whether a holding run kept the program in the
	// dispatcher (see Hold).
	Held bool
}

// PPS is the average rate of the run in frames per second.
func (s Stats) PPS() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Sent) / s.Elapsed.Seconds()
}

// BusyShare is the share of the CPU time the sending threads could have
// used (Elapsed × min(InFlight, CPUs)) that they did use, from 0 to 1.
func (s Stats) BusyShare() float64 {
	c := s.capacity()
	if c <= 0 {
		return 0
	}
	return min(1, s.CPU.Seconds()/c)
}

// IdleShare is the share of that time in which the sending threads
// neither ran nor waited for a CPU: they slept in the kernel (grace
// periods). A generator with a large idle share offers less than it
// could; one that is busy or waits for its CPU does not. With several
// threads on one CPU it is a lower bound (their times are summed).
func (s Stats) IdleShare() float64 {
	c := s.capacity()
	if c <= 0 {
		return 0
	}
	return max(0, 1-(s.CPU+s.Runnable).Seconds()/c)
}

func (s Stats) capacity() float64 {
	n := min(s.InFlight, s.CPUs)
	if s.Elapsed <= 0 || n <= 0 {
		return 0
	}
	return s.Elapsed.Seconds() * float64(n)
}

// ErrUnbounded is returned by Run when nothing would ever stop it.
var ErrUnbounded = errors.New("pktgen: set a count, a duration or a cancellable context")

// Run sends frame out of ifindex until opts or ctx stop it. Like Send, it
// must run on a thread inside the namespace that owns ifindex; the
// threads it starts for the calls in flight join that namespace and take
// the calling thread's CPU affinity. Stats.Sent comes from the program's
// own count of the frames it sent, so a Generator makes one Run (or Send)
// at a time.
func (g *Generator) Run(ctx context.Context, ifindex int, frame []byte, opts RunOptions) (Stats, error) {
	if opts.Count == 0 && opts.Duration == 0 && ctx.Done() == nil {
		return Stats{}, ErrUnbounded
	}
	if opts.Hold > HoldOff {
		return Stats{}, fmt.Errorf("pktgen: hold mode %d: want auto, on or off", uint8(opts.Hold))
	}
	if opts.InFlight < 0 || opts.InFlight > MaxInFlight {
		return Stats{}, fmt.Errorf("pktgen: %d calls in flight: want 1 to %d", opts.InFlight, MaxInFlight)
	}
	if opts.CallTime == 0 {
		opts.CallTime = DefaultCallTime
		if opts.Rate > 0 {
			opts.CallTime = DefaultPacedCallTime
		}
	}
	if opts.CallTime < MinCallTime || opts.CallTime > MaxCallTime {
		return Stats{}, fmt.Errorf("pktgen: call time %v: want %v to %v", opts.CallTime, MinCallTime, MaxCallTime)
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Chunk > maxChunk {
		return Stats{}, fmt.Errorf("pktgen: chunk of %d frames: at most %d", opts.Chunk, maxChunk)
	}
	if len(frame) < 14 {
		return Stats{}, errors.New("pktgen: frame shorter than an Ethernet header")
	}
	th, err := callerThread()
	if err != nil {
		return Stats{}, err
	}
	defer th.close()
	var hold *holder
	if opts.Hold == HoldOn || opts.Hold == HoldAuto && opts.Rate == 0 {
		// Without it (a kernel or sandbox that refuses idle priority)
		// the calls overlap instead.
		hold, _ = g.startHold(th, ifindex, frame)
	}
	if opts.InFlight == 0 {
		opts.InFlight = DefaultInFlight
		if hold == nil {
			opts.InFlight = 2
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var deadline time.Time
	if opts.Duration > 0 {
		ctx, cancel = context.WithTimeout(ctx, opts.Duration)
		defer cancel()
		deadline, _ = ctx.Deadline()
	}
	s := &schedule{opts: opts, start: time.Now(), deadline: deadline, ctx: ctx, ends: make([]time.Time, opts.InFlight)}
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		calls    atomic.Uint64
		cpu      atomic.Int64
		waited   atomic.Int64
	)
	sent0 := g.sentCount()
	for i := range opts.InFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The thread joins the caller's namespace and affinity, and
			// is never given back: it ends with this goroutine.
			runtime.LockOSThread()
			err := th.join()
			if err == nil {
				var used threadTimes
				used, err = g.worker(s, i, ifindex, frame, &calls)
				cpu.Add(int64(used.run))
				waited.Add(int64(used.wait))
			}
			if err != nil {
				errOnce.Do(func() { firstErr = err })
				cancel()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	go s.interrupt(done)
	stats := func() Stats {
		return Stats{
			Sent: g.sentCount() - sent0, Elapsed: time.Since(s.start), Calls: calls.Load(),
			CPU: time.Duration(cpu.Load()), Runnable: time.Duration(waited.Load()),
			InFlight: opts.InFlight, CPUs: th.cpus,
		}
	}
	if opts.Progress != nil {
		t := time.NewTicker(opts.Interval)
		defer t.Stop()
	wait:
		for {
			select {
			case <-done:
				break wait
			case <-t.C:
				opts.Progress(stats())
			}
		}
	}
	<-done
	st := stats()
	if hold != nil {
		// The run's own error only means it did not hold: the frames
		// were sent all the same.
		st.Held = hold.stop(g) == nil
	}
	return st, firstErr
}

// worker makes calls until the schedule says stop, and returns the times
// of its thread.
func (g *Generator) worker(s *schedule, i, ifindex int, frame []byte, calls *atomic.Uint64) (threadTimes, error) {
	t0 := readThreadTimes()
	s.register(i)
	// Stagger the first calls so that they end at different times: a call
	// that ends while another still runs costs no grace period.
	chunk := uint64(firstChunk * (s.opts.InFlight - i) / s.opts.InFlight)
	var rate float64 // this thread's frames per second, once measured
	fd := g.objs.XdpGen.FD()
	for {
		if s.opts.Chunk > 0 {
			chunk = s.opts.Chunk
		} else if rate > 0 {
			chunk = uint64(rate * s.opts.CallTime.Seconds())
		}
		n, wait, ok := s.claim(i, chunk, rate)
		if !ok {
			return readThreadTimes().sub(t0), nil
		}
		if wait > 0 {
			select {
			case <-s.ctx.Done():
				s.unclaim(n)
				return readThreadTimes().sub(t0), nil
			case <-time.After(wait):
			}
		}
		t := time.Now()
		c0 := g.sentCount()
		s.calling(i, true)
		errno := testRunLive(fd, frame, 0, ifindex, uint32(n), s.opts.Batch)
		s.calling(i, false)
		d := time.Since(t)
		s.ended(i)
		switch errno {
		case 0:
		case unix.EINTR:
			// Stopped (or a stray signal): the counter says what the
			// call sent (exactly with one thread; with several, their
			// frames in the meantime count too).
			if done := min(g.sentCount()-c0, n); done < n {
				s.unclaim(n - done)
				n = done
			}
		default:
			s.unclaim(n)
			return readThreadTimes().sub(t0), fmt.Errorf("pktgen: live-frames run on ifindex %d: %w", ifindex, errno)
		}
		calls.Add(1)
		if d > 0 && n > 0 {
			r := float64(n) / d.Seconds()
			if rate == 0 {
				rate = r
			} else {
				rate = 0.5*rate + 0.5*r
			}
		}
	}
}

// sentCount reads the program's count of frames sent.
func (g *Generator) sentCount() uint64 {
	var n uint64
	_ = g.objs.GenSent.Get(&n)
	return n
}

// schedule hands out the frames of a Run to its threads.
type schedule struct {
	opts     RunOptions
	start    time.Time
	deadline time.Time // zero: none
	ctx      context.Context

	mu      sync.Mutex
	claimed uint64 // frames handed to a call so far
	// ends are when each thread's call in progress should end (zero:
	// none in progress), to keep the ends apart.
	ends []time.Time
	// tids are the sending threads, inCall whether each is in a call
	// now, for interrupt.
	tids   []int
	inCall []bool
}

// register records the calling (locked) thread as thread i's.
func (s *schedule) register(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tids == nil {
		s.tids = make([]int, s.opts.InFlight)
		s.inCall = make([]bool, s.opts.InFlight)
	}
	s.tids[i] = unix.Gettid()
}

func (s *schedule) calling(i int, in bool) {
	s.mu.Lock()
	s.inCall[i] = in
	s.mu.Unlock()
}

// interrupt waits for the run to be stopped (its context) and then
// interrupts the calls in progress until done closes: the kernel checks
// for a pending signal between batches and ends the call with EINTR.
// SIGURG is the signal the Go runtime preempts its own threads with,
// harmless here; it is repeated because it may come just before a thread
// enters its call.
func (s *schedule) interrupt(done <-chan struct{}) {
	select {
	case <-done:
		return
	case <-s.ctx.Done():
	}
	pid := unix.Getpid()
	for {
		s.mu.Lock()
		for i, tid := range s.tids {
			if s.inCall[i] {
				_ = unix.Tgkill(pid, tid, unix.SIGURG)
			}
		}
		s.mu.Unlock()
		select {
		case <-done:
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// claim returns how many frames thread i's next call sends (about want),
// and how long to wait before it is due (with a rate), or ok false when
// the run is over. rate is the thread's last measured rate (0: unknown).
func (s *schedule) claim(i int, want uint64, rate float64) (n uint64, wait time.Duration, ok bool) {
	if s.ctx.Err() != nil {
		return 0, 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	n = want
	if s.opts.Chunk == 0 && s.opts.Rate == 0 && rate > 0 {
		n = uint64(rate * s.phase(i, now).Seconds())
	}
	if s.opts.Chunk == 0 {
		n = min(max(n, minChunk), maxChunk)
	}
	if s.opts.Rate > 0 && s.opts.Chunk == 0 {
		// CallTime's worth at a time, then wait until they are due:
		// calls that do not overlap wait for grace periods, and with
		// shorter ones a slow grace period alone would hold the rate
		// back.
		n = max(uint64(float64(s.opts.Rate)*s.opts.CallTime.Seconds()), 1)
	}
	if !s.deadline.IsZero() && rate > 0 && s.opts.Chunk == 0 {
		// End the last call near the deadline rather than a whole call
		// after it.
		left := s.deadline.Sub(now).Seconds()
		n = min(n, max(uint64(left*rate), minChunk))
	}
	if s.opts.Count > 0 {
		if s.claimed >= s.opts.Count {
			return 0, 0, false
		}
		n = min(n, s.opts.Count-s.claimed)
	}
	if s.opts.Rate > 0 {
		due := s.start.Add(time.Duration(float64(s.claimed) / float64(s.opts.Rate) * float64(time.Second)))
		wait = due.Sub(now)
	}
	s.claimed += n
	if rate > 0 {
		s.ends[i] = now.Add(wait + time.Duration(float64(n)/rate*float64(time.Second)))
	}
	return n, wait, true
}

// phase is how long thread i's next call should last so that it ends
// CallTime/InFlight after the latest end of the others' calls in
// progress: the ends stay spread over the period, so some call is always
// running when one ends, and the calls' durations drift back to about
// CallTime by themselves. Equal calls started apart would do the same
// until their rates differ for a while and the ends meet.
func (s *schedule) phase(i int, now time.Time) time.Duration {
	var latest time.Time
	for j, e := range s.ends {
		if j != i && e.After(latest) {
			latest = e
		}
	}
	ct := s.opts.CallTime
	if latest.Before(now) {
		return ct // no other call in progress
	}
	d := latest.Sub(now) + ct/time.Duration(s.opts.InFlight)
	return min(max(d, ct/4), 2*ct)
}

// ended records that thread i's call returned.
func (s *schedule) ended(i int) {
	s.mu.Lock()
	s.ends[i] = time.Time{}
	s.mu.Unlock()
}

// unclaim gives back frames a call did not send.
func (s *schedule) unclaim(n uint64) {
	s.mu.Lock()
	s.claimed -= n
	s.mu.Unlock()
}

// threadTimes is the time the calling thread spent on a CPU and waiting
// for one (runnable, on a run queue), from /proc/thread-self/schedstat;
// the rest of its life it slept. Without schedstat, the wait is zero and
// the CPU time comes from the thread's clock.
type threadTimes struct{ run, wait time.Duration }

func (a threadTimes) sub(b threadTimes) threadTimes {
	return threadTimes{run: a.run - b.run, wait: a.wait - b.wait}
}

func readThreadTimes() threadTimes {
	var t threadTimes
	if b, err := os.ReadFile("/proc/thread-self/schedstat"); err == nil {
		var run, wait int64
		if n, _ := fmt.Sscan(string(b), &run, &wait); n == 2 {
			return threadTimes{run: time.Duration(run), wait: time.Duration(wait)}
		}
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err == nil {
		t.run = time.Duration(ts.Nano())
	}
	return t
}

// thread is what the sending threads copy from the calling one: its
// network namespace and CPU affinity.
type thread struct {
	netns    *os.File
	ino      uint64
	affinity unix.CPUSet
	cpus     int
}

func callerThread() (*thread, error) {
	// The caller's thread, not the process's: the namespace is the
	// thread's (sandbox.InNS moves one thread).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t := &thread{}
	if err := unix.SchedGetaffinity(0, &t.affinity); err != nil {
		return nil, fmt.Errorf("pktgen: read CPU affinity: %w", err)
	}
	if t.affinity.Count() > 1 {
		// One CPU for all the runs: their frames then reach the peer's
		// ring from one CPU, as one sender's do, instead of several
		// CPUs overrunning it together.
		cpu := currentCPU()
		if cpu < 0 || !t.affinity.IsSet(cpu) {
			for cpu = 0; !t.affinity.IsSet(cpu); cpu++ {
			}
		}
		t.affinity.Zero()
		t.affinity.Set(cpu)
	}
	t.cpus = t.affinity.Count()
	f, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("pktgen: open the network namespace: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("pktgen: network namespace: %w", err)
	}
	t.netns, t.ino = f, st.Ino
	return t, nil
}

// currentCPU is the CPU the calling thread last ran on (field 39 of
// /proc/thread-self/stat), or -1.
func currentCPU() int {
	b, err := os.ReadFile("/proc/thread-self/stat")
	if err != nil {
		return -1
	}
	// pid (comm) state ...: comm may hold spaces; count from after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	// After the comm, field 3 (state) is f[0]: processor (39) is f[36].
	if len(f) < 37 {
		return -1
	}
	cpu, err := strconv.Atoi(f[36])
	if err != nil {
		return -1
	}
	return cpu
}

// join moves the calling (locked) thread into t's namespace, if it is in
// another, and onto t's CPUs.
func (t *thread) join() error {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil || st.Ino != t.ino {
		if err := unix.Setns(int(t.netns.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("pktgen: join the caller's network namespace: %w", err)
		}
	}
	if err := unix.SchedSetaffinity(0, &t.affinity); err != nil {
		return fmt.Errorf("pktgen: set CPU affinity: %w", err)
	}
	return nil
}

func (t *thread) close() { t.netns.Close() }

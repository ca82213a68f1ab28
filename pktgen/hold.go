package pktgen

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Hold says whether Run keeps the generator's program in the kernel's XDP
// dispatcher with a holding run.
//
// Every live-frames test run adds its program to the dispatcher when it
// starts and removes it when it ends, unless another run of the same
// program is in progress (the dispatcher counts a program's users), and
// each change waits for an RCU grace period: 10-30 ms on a loaded VM,
// 0.1 ms where grace periods are expedited. The holding run is one more
// run of the program, on the sending threads' CPU, from a thread at idle
// scheduling priority (SCHED_IDLE): it runs only when nothing else wants
// that CPU, drops what it makes instead of sending it (its frame carries
// XDP metadata, which the program drops), and lasts until Run stops it
// with a signal. While it is in progress no sending run waits for a grace
// period, whatever its length, and there is no second sending thread to
// share the CPU and its caches with.
type Hold uint8

const (
	// HoldAuto holds when Rate is 0 (unpaced). A paced run leaves its CPU
	// idle between calls, and a holding run would fill that idle time.
	HoldAuto Hold = iota
	// HoldOn always holds.
	HoldOn
	// HoldOff never holds: every call that runs alone waits for two grace
	// periods (as the generator did before).
	HoldOff
)

func (h Hold) String() string {
	switch h {
	case HoldAuto:
		return "auto"
	case HoldOn:
		return "on"
	case HoldOff:
		return "off"
	}
	return fmt.Sprintf("Hold(%d)", uint8(h))
}

// ParseHold parses auto, on or off.
func ParseHold(s string) (Hold, error) {
	for _, h := range []Hold{HoldAuto, HoldOn, HoldOff} {
		if s == h.String() {
			return h, nil
		}
	}
	return 0, fmt.Errorf("pktgen: hold %q: want auto, on or off", s)
}

// holdMeta is the XDP metadata of the holding run's frame: any metadata
// makes the program drop the frame.
const holdMeta = 4

// holder is a holding run in progress.
type holder struct {
	mu      sync.Mutex
	tid     int // the thread in the run, once it is in it
	stopped bool
	done    chan struct{}
	err     error
}

// startHold starts the holding run on a thread of its own that joins th's
// namespace and CPUs. It returns once that thread is at idle priority and
// about to enter the run, or with an error (then no run was started: a
// holding run at normal priority would take half the CPU from the
// senders).
func (g *Generator) startHold(th *thread, ifindex int, frame []byte) (*holder, error) {
	h := &holder{done: make(chan struct{})}
	data := make([]byte, holdMeta+len(frame))
	copy(data[holdMeta:], frame)
	ready := make(chan error, 1)
	go func() {
		defer close(h.done)
		if g.holdLeft != nil {
			defer g.holdLeft()
		}
		// The thread is never given back: it has left the process's
		// namespace and priority. It ends with this goroutine.
		runtime.LockOSThread()
		if err := th.join(); err != nil {
			ready <- err
			return
		}
		if err := unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0); err != nil {
			ready <- fmt.Errorf("pktgen: idle priority for the holding run: %w", err)
			return
		}
		h.mu.Lock()
		h.tid = unix.Gettid()
		h.mu.Unlock()
		ready <- nil
		fd := g.objs.XdpGen.FD()
		for {
			h.mu.Lock()
			stop := h.stopped
			h.mu.Unlock()
			if stop {
				return
			}
			// Batch 1: its frames go nowhere, so its page pool need be
			// no larger than one frame, out of the senders' cache.
			errno := testRunLive(fd, data, holdMeta, ifindex, 1<<31, 1)
			if errno != 0 && errno != unix.EINTR {
				h.mu.Lock()
				h.err = fmt.Errorf("pktgen: holding run on ifindex %d: %w", ifindex, errno)
				h.mu.Unlock()
				return
			}
		}
	}()
	if err := <-ready; err != nil {
		<-h.done
		return nil, err
	}
	return h, nil
}

// stop ends the holding run: the signal interrupts the test run (the
// kernel checks for pending signals between batches), and is repeated in
// case it came before the thread entered the run. SIGURG is the one the Go
// runtime sends its own threads to preempt them; it is harmless here.
//
// Leaving can take long: the last run of the program to end takes it out
// of the XDP dispatcher and waits for an RCU grace period (which a loaded
// machine can stretch past a second: CI once saw a cancelled run return
// after 1.4 s), and at idle priority on a busy CPU the thread runs only
// now and then. So stop gives the thread normal priority back (allowed to
// root or with CAP_SYS_NICE; otherwise it stays idle) and returns after
// holdStopWait even if the thread has not left the kernel yet: the frames
// it makes are dropped, and Run's caller need not wait for it. g.holds
// keeps Close from closing the program before it has left.
func (h *holder) stop(g *Generator) error {
	h.mu.Lock()
	h.stopped = true
	tid := h.tid
	h.mu.Unlock()
	_ = unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_NORMAL}, 0)
	pid := unix.Getpid()
	give := time.After(holdStopWait)
	for {
		_ = unix.Tgkill(pid, tid, unix.SIGURG)
		select {
		case <-h.done:
			return h.runErr()
		case <-give:
			g.holds.Add(1)
			go func() {
				defer g.holds.Done()
				for {
					_ = unix.Tgkill(pid, tid, unix.SIGURG)
					select {
					case <-h.done:
						return
					case <-time.After(time.Millisecond):
					}
				}
			}()
			return h.runErr()
		case <-time.After(time.Millisecond):
		}
	}
}

// holdStopWait is how long stop waits for the holding thread to leave.
const holdStopWait = 20 * time.Millisecond

func (h *holder) runErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

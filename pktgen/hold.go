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
				h.err = fmt.Errorf("pktgen: holding run on ifindex %d: %w", ifindex, errno)
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
func (h *holder) stop() error {
	h.mu.Lock()
	h.stopped = true
	tid := h.tid
	h.mu.Unlock()
	pid := unix.Getpid()
	for {
		_ = unix.Tgkill(pid, tid, unix.SIGURG)
		select {
		case <-h.done:
			return h.err
		case <-time.After(time.Millisecond):
		}
	}
}

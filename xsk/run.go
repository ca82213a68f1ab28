package xsk

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Verdict is what Run does with a received frame once the handler returns.
type Verdict uint8

const (
	// Release gives the frame back for receiving (the zero value).
	Release Verdict = iota
	// Transmit sends the frame's Data out of the same socket, without a
	// copy: the handler may rewrite, shorten or grow Data first.
	Transmit
	// Keep leaves the frame with the application, which must later
	// Release or Transmit it from the goroutine running Run (for
	// example from a later handler call).
	Keep
)

// Handler processes one batch of received frames. verdicts has one entry
// per frame, all Release when the handler is called; the handler sets the
// ones it wants otherwise. The frames and the slices are valid only until
// the handler returns (except frames marked Keep). A non-nil error stops
// Run, which returns it after acting on the verdicts. To stop Run from the
// handler, return an error (or cancel Run's context): the handler must not
// call Close, which waits for Run to return and so would wait forever.
type Handler func(frames []Frame, verdicts []Verdict) error

// txRetries bounds how often Run retries a full TX ring before it drops the
// rest of a batch (counted in Stats.TxDropped).
const txRetries = 1000

// Run receives batches of up to Options.Batch frames and hands each to h
// until ctx is done, h returns an error, or the socket is closed. Between
// batches it reaps transmit completions and refills the fill ring; when the
// RX ring is empty it waits as Options.Wait says. Run returns nil when ctx
// is done or the socket was closed, h's error if h failed, else the error
// that stopped it.
//
// Run occupies the calling goroutine, which becomes the goroutine driving
// the socket: the handler may call the socket's methods.
func (s *Socket) Run(ctx context.Context, h Handler) error {
	if h == nil {
		return fmt.Errorf("xsk: receive on ifindex %d queue %d: no handler: %w", s.ifindex, s.queue, ErrInvalidOptions)
	}
	return s.run(ctx, h, 0)
}

// run is Run; with a nil handler it recycles every frame it receives
// straight to the fill ring (RxDrop) and stops, returning errLimit, once
// it has taken limit frames (0: no limit).
func (s *Socket) run(ctx context.Context, h Handler, limit uint64) error {
	if !s.runMu.TryLock() {
		return fmt.Errorf("xsk: receive on ifindex %d queue %d: %w", s.ifindex, s.queue, errRunning)
	}
	defer s.runMu.Unlock()
	if s.closed.Load() || s.closing.Load() {
		return nil
	}
	var stop atomic.Bool
	unregister := context.AfterFunc(ctx, func() {
		stop.Store(true)
		s.closeMu.Lock()
		if !s.closed.Load() {
			s.wakePoll()
		}
		s.closeMu.Unlock()
	})
	defer unregister()
	s.drainEventfd()
	s.rawWaiting = false // a wait a stop cut short is not resumed

	frames, verdicts := s.rxBuf, s.verdicts
	var spinStart time.Time
	var taken uint64
	for !stop.Load() && !s.closing.Load() {
		if s.txInFlight > 0 {
			if _, err := s.Complete(); err != nil {
				return err
			}
		}
		if s.wait == WaitPoll {
			if err := s.pollBatch(); err != nil {
				return err
			}
		}
		var n int
		var err error
		if h == nil {
			n, err = s.recycle(uint32(len(frames)))
		} else {
			n, err = s.Receive(frames)
		}
		if err != nil {
			return err
		}
		if n == 0 {
			if err := s.idle(&spinStart); err != nil {
				return err
			}
			continue
		}
		spinStart = time.Time{}
		if h == nil {
			if taken += uint64(n); limit > 0 && taken >= limit {
				return errLimit
			}
			continue
		}
		clear(verdicts[:n])
		herr := h(frames[:n], verdicts[:n])
		if err := s.dispatch(frames[:n], verdicts[:n], &stop); err != nil {
			return errors.Join(herr, err)
		}
		if herr != nil {
			return herr
		}
	}
	return nil
}

var errRunning = errors.New("another loop already drives this socket")

// idle is what Run does when the RX ring is empty.
func (s *Socket) idle(spinStart *time.Time) error {
	if err := s.wakeRX(); err != nil {
		return err
	}
	switch s.wait {
	case WaitSpin, WaitPoll:
		return nil
	case WaitAdaptive:
		now := time.Now()
		if spinStart.IsZero() {
			*spinStart = now
			return nil
		}
		if now.Sub(*spinStart) < s.spinFor {
			return nil
		}
	}
	*spinStart = time.Time{}
	return s.poll(s.pollTimeout())
}

// rawPollWait is how long poll mode waits for frames in a raw poll() (see
// pollFor) before it falls back to the runtime's blocking one: long enough
// that while frames flow, even in bursts with gaps of tens of milliseconds
// (a paced or descheduled sender), every wait is a raw one, short enough
// that an idle socket soon sleeps the ordinary way.
//
// Each fallback costs more than its own system call: the runtime's monitor
// thread takes the P of a blocking call that lasts over 20µs, and once it
// has taken one it wakes every 20µs for a while instead of every 10ms,
// each time a context switch on the socket's CPU, besides the futex
// wake-ups that give the P back. With the 200µs wait this replaced, a
// third of poll mode's context switches on a core of its own were the
// monitor's (docs/BENCHMARKS.md, "Poll mode: CPU per frame"). The monitor
// still interrupts a raw wait every 10ms with the runtime's preemption
// signal (EINTR), and the loop then yields at once, so the collector and
// other goroutines wait no longer than for a goroutine that spins.
//
// It is also the longest a stop (a cancelled context, Close) waits for a
// raw wait to end, which watches the socket alone: in practice the next
// preemption signal ends it sooner.
const rawPollWait = 50 * time.Millisecond

// pollBatch is poll mode's poll() before a batch, one system call per
// batch as in xdpsock -p, on the socket alone and in the raw form that
// skips the Go scheduler. When the RX ring already shows frames, poll()
// cannot sleep: it is made without a timeout. An empty ring is waited for
// in raw poll() calls of up to rawPollWait in total, and only if nothing
// came in the ordinary blocking poll(), which the eventfd interrupts.
//
// The raw wait leaves out the eventfd because every descriptor costs a
// wait-queue entry added and removed on each sleep, and keeps no clock of
// its own: ppoll() writes back the time left, also when the preemption
// signal cuts it short (EINTR), and the next call waits for the rest. So
// the only system call of a sleep is the ppoll() itself. A stop is seen
// when the wait ends (frames, EINTR or the time up): the loop checks for
// one before every poll().
func (s *Socket) pollBatch() error {
	if s.rx.avail(1) == 0 {
		if !s.rawWaiting {
			s.rawWaiting = true
			s.rawLeft = unix.NsecToTimespec(rawPollWait.Nanoseconds())
		}
		if s.rawLeft.Sec > 0 || s.rawLeft.Nsec > 0 {
			s.c.polls.Add(1)
			n, errno := pollFor(&s.pollNowFd, &s.rawLeft)
			switch {
			case errno == unix.EINTR:
				return nil
			case errno != 0:
				return fmt.Errorf("xsk: poll ifindex %d queue %d: %w", s.ifindex, s.queue, errno)
			case n > 0:
				s.rawWaiting = false
				return nil
			}
			// The time is up (the kernel wrote back what was left,
			// which a timer that fired within its slack may leave a
			// hair above zero). The loop checks for a stop before the
			// blocking poll() of the next call.
			s.rawLeft = unix.Timespec{}
			return nil
		}
		s.c.blockingPolls.Add(1)
		err := s.poll(s.pollTimeout())
		s.rawWaiting = false
		return err
	}
	s.rawWaiting = false
	s.c.polls.Add(1)
	switch errno := pollNow(&s.pollNowFd); errno {
	case 0, unix.EINTR:
		return nil
	default:
		return fmt.Errorf("xsk: poll ifindex %d queue %d: %w", s.ifindex, s.queue, errno)
	}
}

// pollTimeout is -1 (no timeout) unless frames are out for transmission:
// their completions refill the free list and do not wake poll(), so then
// Run looks again after a millisecond.
func (s *Socket) pollTimeout() int {
	if s.txInFlight > 0 {
		return 1
	}
	return -1
}

// dispatch acts on the handler's verdicts.
func (s *Socket) dispatch(frames []Frame, verdicts []Verdict, stop *atomic.Bool) error {
	all := true
	for _, v := range verdicts {
		if v != Release {
			all = false
			break
		}
	}
	if all {
		return s.releaseAll(frames)
	}
	rel, tx := s.relBuf[:0], s.txBuf[:0]
	for i, v := range verdicts {
		switch v {
		case Release:
			rel = append(rel, frames[i])
		case Transmit:
			tx = append(tx, frames[i])
		case Keep:
		default:
			return fmt.Errorf("xsk: handler returned verdict %d for frame %d: %w", v, i, ErrInvalidOptions)
		}
	}
	var errs []error
	for sent, tries := 0, 0; sent < len(tx); tries++ {
		k, err := s.Transmit(tx[sent:])
		sent += k
		if err != nil {
			errs = append(errs, err)
			if errors.Is(err, ErrInvalidFrame) {
				// tx[sent] was refused. If the application still holds
				// it (its Data lay outside its frame), it goes back like
				// the others; if not, it is not ours to give back.
				if s.holds(tx[sent]) {
					rel = append(rel, tx[sent])
				}
				sent++
				continue
			}
			rel = append(rel, tx[sent:]...)
			break
		}
		if sent == len(tx) {
			break
		}
		if tries == txRetries || stop.Load() || s.closing.Load() {
			s.c.txDropped.Add(uint64(len(tx) - sent))
			rel = append(rel, tx[sent:]...)
			break
		}
		if _, err := s.Complete(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(rel) > 0 {
		if err := s.releaseAll(rel); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// releaseAll releases the frames of a batch, skipping (and reporting) any
// that the application no longer holds, so that one frame the handler got
// wrong does not strand the rest of the batch outside the rings.
func (s *Socket) releaseAll(frames []Frame) error {
	var errs []error
	for len(frames) > 0 {
		done, err := s.release(frames)
		if err == nil {
			break
		}
		errs = append(errs, err)
		frames = frames[done+1:]
	}
	return errors.Join(errs...)
}

// holds reports whether the application holds f as a frame of this socket.
func (s *Socket) holds(f Frame) bool {
	fi := (f.addr & addrMask) >> s.shift
	return uint16(f.addr>>unalignedOffsetShift) == s.id && fi < uint64(len(s.state)) && s.state[fi] == placeHeld
}

// Wait blocks until the RX ring has frames, timeout passes (a negative
// timeout waits indefinitely), or the socket is closed (ErrClosed).
func (s *Socket) Wait(timeout time.Duration) error {
	if s.closed.Load() || s.closing.Load() {
		return ErrClosed
	}
	if s.rx.avail(1) > 0 {
		return nil
	}
	if err := s.wakeRX(); err != nil {
		return err
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	if err := s.poll(ms); err != nil {
		return err
	}
	if s.closing.Load() {
		return ErrClosed
	}
	return nil
}

// poll sleeps in poll() until the RX ring has frames, the eventfd is
// written (Close, a cancelled context), or timeout milliseconds pass.
func (s *Socket) poll(timeout int) error {
	s.c.polls.Add(1)
	s.pollFds[0].Revents, s.pollFds[1].Revents = 0, 0
	_, err := unix.Poll(s.pollFds[:], timeout)
	if err != nil && err != unix.EINTR {
		return fmt.Errorf("xsk: poll ifindex %d queue %d: %w", s.ifindex, s.queue, err)
	}
	if s.pollFds[1].Revents != 0 {
		s.drainEventfd()
	}
	return nil
}

// wakePoll interrupts a poll() in progress (or the next one). The caller
// guarantees the eventfd is open.
func (s *Socket) wakePoll() {
	if s.evfd < 0 {
		return
	}
	one := [8]byte{1}
	_, _ = unix.Write(s.evfd, one[:])
}

func (s *Socket) drainEventfd() {
	_, _ = unix.Read(s.evfd, s.evbuf[:])
}

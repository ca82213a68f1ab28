package xsk

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// ModeOptions bound the classic loops.
type ModeOptions struct {
	// Frames stops the loop after this many frames: received (RxDrop,
	// L2Fwd) or completed, i.e. sent (TxOnly). 0 runs until ctx is done.
	Frames uint64
}

// errLimit stops Run when a mode reached its frame count.
var errLimit = errors.New("frame limit reached")

// RxDrop receives frames and gives them straight back to the fill ring:
// the receive-side ceiling of the socket. It returns nil when ctx is done,
// the socket is closed or opts.Frames frames were received (the last batch
// may take it past that).
//
// It is Run's loop (waits, wake-ups, stop) without the handler: each
// batch's RX descriptors go back to the fill ring as they are, as in
// xdpsock's rxdrop, instead of becoming Frames that are then released
// one by one, which about halved the user-space loop's time per frame in
// poll mode's profile (docs/BENCHMARKS.md, "Poll mode: CPU per frame").
func RxDrop(ctx context.Context, s *Socket, opts ModeOptions) error {
	err := s.run(ctx, nil, opts.Frames)
	if errors.Is(err, errLimit) {
		return nil
	}
	return err
}

// L2Fwd sends every received frame back out of the same socket with its
// Ethernet source and destination swapped, in place, without a copy. It
// stops as RxDrop does.
func L2Fwd(ctx context.Context, s *Socket, opts ModeOptions) error {
	if s.tx == nil {
		return s.errRxOnly("l2fwd")
	}
	var n uint64
	err := s.Run(ctx, func(frames []Frame, verdicts []Verdict) error {
		for i := range frames {
			SwapMACs(frames[i].Data)
			verdicts[i] = Transmit
		}
		n += uint64(len(frames))
		if opts.Frames > 0 && n >= opts.Frames {
			return errLimit
		}
		return nil
	})
	if errors.Is(err, errLimit) {
		return nil
	}
	return err
}

// SwapMACs exchanges the destination and source addresses of the Ethernet
// frame b in place; shorter frames are left alone.
func SwapMACs(b []byte) {
	if len(b) < 12 {
		return
	}
	var t [6]byte
	copy(t[:], b[0:6])
	copy(b[0:6], b[6:12])
	copy(b[6:12], t[:])
}

// TxOnly transmits frame over and over as fast as the socket allows. Each
// UMEM frame gets a copy of frame once, the first time it is used; after
// that only descriptors move, as in xdpsock's txonly. The loop never
// sleeps (it is a traffic generator): it reaps completions and kicks the
// kernel between batches. It returns nil when ctx is done, the socket is
// closed, or opts.Frames frames have completed; with opts.Frames set it
// queues no more than that many.
func TxOnly(ctx context.Context, s *Socket, frame []byte, opts ModeOptions) error {
	if len(frame) == 0 || uint64(len(frame)) > s.frameSize-s.headroom {
		return fmt.Errorf("xsk: txonly frame of %d bytes: %w (1 to %d)", len(frame), ErrInvalidOptions, s.frameSize-s.headroom)
	}
	if s.tx == nil {
		return s.errRxOnly("txonly")
	}
	if !s.runMu.TryLock() {
		return fmt.Errorf("xsk: txonly on ifindex %d queue %d: %w", s.ifindex, s.queue, errRunning)
	}
	defer s.runMu.Unlock()
	var stop atomic.Bool
	unregister := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer unregister()

	written := make([]bool, s.umem.count)
	buf := make([]Frame, s.batch)
	pending := buf[:0] // allocated frames the TX ring had no room for
	start := s.c.completed.Load()
	var queued uint64 // frames this call put on the TX ring
	for !stop.Load() && !s.closing.Load() {
		if _, err := s.Complete(); err != nil {
			return err
		}
		if opts.Frames > 0 && s.c.completed.Load()-start >= opts.Frames {
			break
		}
		if len(pending) == 0 {
			want := len(buf)
			if opts.Frames > 0 {
				// The last batch is cut short: Frames is a count of
				// frames, not of batches.
				want = int(min(uint64(want), opts.Frames-queued))
			}
			n := s.Alloc(buf[:want])
			for i := range buf[:n] {
				f := &buf[i]
				if fi := f.Addr() >> s.shift; !written[fi] {
					copy(f.Data, frame)
					written[fi] = true
				}
				f.Data = f.Data[:len(frame)]
			}
			pending = buf[:n]
		}
		if len(pending) == 0 {
			if s.txInFlight == 0 && (opts.Frames == 0 || queued < opts.Frames) {
				// Nothing free and nothing coming back: the frames are
				// lent for receiving (which TxOnly never takes back) or
				// held by the caller. Waiting would only spin.
				lent := s.lent()
				return fmt.Errorf("xsk: txonly on ifindex %d queue %d: %w: none of the socket's %d frames is free "+
					"(%d lent for receiving, %d held by the application): open the socket with Options.Frames above FillSize, "+
					"or Release held frames", s.ifindex, s.queue, ErrInvalidOptions, s.owned, lent, uint64(s.owned)-lent)
			}
			continue // everything is in flight: wait for completions
		}
		k, err := s.Transmit(pending)
		queued += uint64(k)
		if err != nil {
			return errors.Join(err, s.Release(pending[k:]))
		}
		pending = pending[k:]
	}
	// Frames still held go back to the free list.
	return s.Release(pending)
}

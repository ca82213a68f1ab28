package pktgen

import (
	"context"
	"errors"
	"time"
)

// RunOptions bound a Run: it stops at Count frames, after Duration, or when
// the context ends, whichever comes first. Zero Count and Duration with a
// context that never ends is refused: a generator must stop by itself.
type RunOptions struct {
	Count    uint64        // frames to send, 0 = no limit
	Duration time.Duration // how long to send, 0 = no limit
	Rate     uint64        // frames per second, 0 = as fast as possible
	Batch    uint32        // frames per kernel batch (0 = 64)
	// Progress, if set, is called about every Interval with the totals so
	// far, from the goroutine that called Run.
	Progress func(Stats)
	Interval time.Duration // default 1s
}

// Stats describe a Run so far.
type Stats struct {
	Sent    uint64
	Elapsed time.Duration
}

// PPS is the average rate of the run in frames per second.
func (s Stats) PPS() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Sent) / s.Elapsed.Seconds()
}

// ErrUnbounded is returned by Run when nothing would ever stop it.
var ErrUnbounded = errors.New("pktgen: set a count, a duration or a cancellable context")

// Run sends frame out of ifindex until opts or ctx stop it. Like Send, it
// must run on a thread inside the namespace that owns ifindex.
func (g *Generator) Run(ctx context.Context, ifindex int, frame []byte, opts RunOptions) (Stats, error) {
	if opts.Count == 0 && opts.Duration == 0 && ctx.Done() == nil {
		return Stats{}, ErrUnbounded
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Duration)
		defer cancel()
	}
	// Each kernel call sends a chunk: big enough that the syscall costs
	// nothing next to it, small enough (a few ms at full speed) that a
	// deadline or a rate is kept closely.
	chunk := uint64(65536)
	if opts.Rate > 0 {
		chunk = max(opts.Rate/100, 1) // about 10 ms worth
	}
	start := time.Now()
	lastReport := start
	var st Stats
	for {
		if err := ctx.Err(); err != nil {
			break
		}
		n := chunk
		if opts.Count > 0 {
			if st.Sent >= opts.Count {
				break
			}
			n = min(n, opts.Count-st.Sent)
		}
		if _, err := g.Send(ifindex, frame, uint32(n), opts.Batch); err != nil {
			st.Elapsed = time.Since(start)
			return st, err
		}
		st.Sent += n
		now := time.Now()
		if opts.Rate > 0 {
			// Sleep until the time at which st.Sent frames are due.
			due := start.Add(time.Duration(float64(st.Sent) / float64(opts.Rate) * float64(time.Second)))
			if d := due.Sub(now); d > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
				now = time.Now()
			}
		}
		if opts.Progress != nil && now.Sub(lastReport) >= opts.Interval {
			lastReport = now
			st.Elapsed = now.Sub(start)
			opts.Progress(st)
		}
	}
	st.Elapsed = time.Since(start)
	return st, nil
}

package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/xdpdrop/xdpdrop/xsk"
)

// ringFlags are the UMEM and ring sizes of `redirect`'s sockets.
type ringFlags struct {
	frames, fill, completion, rx, tx int
}

// Limits of the ring and UMEM size flags.
const (
	maxRingSize   = 1 << 20 // what package xsk accepts
	maxUMEMFrames = 1 << 18 // per socket: 1 GiB of 4096-byte frames
)

// Defaults of the ring and UMEM size flags, chosen by measurement
// (docs/BENCHMARKS.md, "Ring and UMEM sizes").
const (
	defaultUMEMFrames = 4096
	defaultFillSize   = 4096
	defaultCompSize   = xsk.DefaultRingSize
	defaultRxSize     = 4096
	defaultTxSize     = xsk.DefaultRingSize
)

// ringsHelp explains the defaults, for redirect's --help.
const ringsHelp = `Ring and UMEM sizes (--frames, --fill-size, --completion-size, --rx-size,
--tx-size; powers of two up to 1048576, --frames up to 262144 per socket):
each socket owns --frames UMEM frames (16 MiB of 4096-byte frames by
default) and lends at most --fill-size of them to the kernel for receiving.
The fill and RX rings are what absorbs a burst while the application is
off its CPU: 4096 entries hold 0.8 ms at 5 Mpps. Lending all 4096 frames
(as the kernel's xdpsock does) lost a third fewer frames than lending 2048
when the application shared its core with the kernel's receive work, and
no more on a core of its own (docs/BENCHMARKS.md); an RX ring smaller than
the fill ring only moves the loss there (rx_ring_full). Every action here
sends or recycles the frames it received, so none need to stay free; raise
--frames above --fill-size only for headroom. The completion and TX rings
(2048) matter for l2fwd only, which sends at most a batch at a time; the
sockets of the other actions have no TX ring at all (in copy mode each
poll() on a socket with one also runs the kernel's transmit path).`

func (r *ringFlags) register(fl *pflag.FlagSet) {
	fl.IntVar(&r.frames, "frames", defaultUMEMFrames, "UMEM frames per socket (with --shared-umem, times the queues), at least --fill-size")
	fl.IntVar(&r.fill, "fill-size", defaultFillSize, "fill ring size: the most frames lent to the kernel for receiving")
	fl.IntVar(&r.completion, "completion-size", defaultCompSize, "completion ring size (transmitted frames coming back)")
	fl.IntVar(&r.rx, "rx-size", defaultRxSize, "RX ring size (received frames waiting for the application)")
	fl.IntVar(&r.tx, "tx-size", defaultTxSize, "TX ring size (frames waiting to be sent; l2fwd only: the other actions open no TX ring)")
}

// validate checks the sizes before anything is attached or opened.
func (r *ringFlags) validate() error {
	for _, s := range []struct {
		flag string
		n    int
	}{{"--fill-size", r.fill}, {"--completion-size", r.completion}, {"--rx-size", r.rx}, {"--tx-size", r.tx}} {
		if s.n < 1 || s.n > maxRingSize || s.n&(s.n-1) != 0 {
			return usagef("%s %d: want a power of two from 1 to %d", s.flag, s.n, maxRingSize)
		}
	}
	switch {
	case r.frames < 1 || r.frames > maxUMEMFrames:
		return usagef("--frames %d: want 1 to %d per socket", r.frames, maxUMEMFrames)
	case r.frames < r.fill:
		return usagef("--frames %d is less than --fill-size %d: the fill ring could never be full; raise --frames or lower --fill-size", r.frames, r.fill)
	}
	return nil
}

// apply sets the sizes on one socket's options; a private UMEM gets the
// socket's frames.
func (r *ringFlags) apply(o *xsk.Options) {
	o.FillSize, o.CompletionSize, o.RxSize, o.TxSize = r.fill, r.completion, r.rx, r.tx
	o.Frames = r.frames
	if o.UMEM == nil {
		o.UMEMOptions.FrameCount = r.frames
	}
}

// describe is the sizes as the startup line of redirect prints them.
func describeRings(r xsk.Rings, frameSize int) string {
	tx := fmt.Sprintf("tx %d", r.TX)
	if r.TX == 0 {
		tx = "no tx (receive only)"
	}
	return fmt.Sprintf("%d frames of %d B; rings: fill %d, completion %d, rx %d, %s",
		r.Frames, frameSize, r.Fill, r.Completion, r.RX, tx)
}

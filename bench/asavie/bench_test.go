package asavie

import (
	"context"
	"testing"
	"time"

	"github.com/asavie/xdp"
	"github.com/cilium/ebpf/link"

	"github.com/xdpdrop/xdpdrop/xsk"
)

// Both libraries get the same rings (2048 entries each), 4096 frames of
// 4096 bytes, copy mode (veth has no zero-copy) and a native XDP program
// that redirects queue 0 into an XSKMAP. ns/op is per frame.

var asavieOpts = xdp.SocketOptions{
	NumFrames: 4096, FrameSize: 4096,
	FillRingNumDescs: 2048, CompletionRingNumDescs: 2048, RxRingNumDescs: 2048, TxRingNumDescs: 2048,
}

func mpps(b *testing.B, frames int, d time.Duration) {
	b.ReportMetric(float64(frames)/d.Seconds()/1e6, "Mpps")
}

// outMpps reports the rate at which frames arrived at the peer.
func outMpps(b *testing.B, arrived func() uint64, before uint64, d time.Duration) {
	b.ReportMetric(float64(arrived()-before)/d.Seconds()/1e6, "out-Mpps")
}

// openXSK attaches xdpdrop's redirect program and opens an xsk socket.
func openXSK(b *testing.B, e *env, opts xsk.Options) *xsk.Socket {
	red, err := xsk.NewRedirect(xsk.RedirectOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { red.Close() })
	l, err := link.AttachXDP(link.XDPOptions{Program: red.Program(), Interface: e.veth.Index, Flags: link.XDPDriverMode})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	opts.Ifindex, opts.Queue = e.veth.Index, 0
	s, err := xsk.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := red.Register(s); err != nil {
		b.Fatal(err)
	}
	return s
}

// openAsavie attaches asavie/xdp's own program and opens its socket.
func openAsavie(b *testing.B, e *env) *xdp.Socket {
	prog, err := xdp.NewProgram(1)
	if err != nil {
		b.Fatal(err)
	}
	if err := prog.Attach(e.veth.Index); err != nil {
		prog.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		prog.Detach(e.veth.Index)
		prog.Close()
	})
	s, err := xdp.NewSocket(e.veth.Index, 0, &asavieOpts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := prog.Register(0, s.FD()); err != nil {
		b.Fatal(err)
	}
	return s
}

var xskModes = []struct {
	name string
	opts xsk.Options
	napi bool
}{
	{"xsk/default", xsk.Options{}, false},
	{"xsk/block", xsk.Options{Wait: xsk.WaitBlock}, false},
	{"xsk/poll", xsk.Options{Wait: xsk.WaitPoll}, false},
	{"xsk/spin", xsk.Options{Wait: xsk.WaitSpin}, false},
	{"xsk/default-no-need-wakeup", xsk.Options{DisableNeedWakeup: true}, false},
	{"xsk/busypoll-spin", xsk.Options{Wait: xsk.WaitSpin, BusyPoll: xsk.BusyPoll{Enable: true}}, true},
}

// placements: the consumer on the other core than the generator and the
// kernel's receive work, or on the same core (sharing it with both).
var placements = []struct {
	name string
	cpu  int
}{{"other-core", consumerCPU}, {"same-core", genCPU}}

func BenchmarkRxDrop(b *testing.B) {
	for _, p := range placements {
		for _, m := range xskModes {
			b.Run(m.name+"/"+p.name, func(b *testing.B) {
				e := newEnv(b)
				if m.napi {
					prev, err := xsk.SetNAPIDefer(e.veth.Name, xsk.RecommendedNAPIDefer())
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { xsk.SetNAPIDefer(e.veth.Name, prev) })
				}
				s := openXSK(b, e, m.opts)
				defer e.generate(b)()
				defer pin(b, p.cpu)()
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				if err := xsk.RxDrop(context.Background(), s, xsk.ModeOptions{Frames: uint64(b.N)}); err != nil {
					b.Fatal(err)
				}
				mpps(b, b.N, time.Since(start))
			})
		}
		for _, poll := range []bool{true, false} {
			name := "asavie/poll/" + p.name
			if !poll {
				name = "asavie/spin/" + p.name
			}
			b.Run(name, func(b *testing.B) {
				e := newEnv(b)
				s := openAsavie(b, e)
				defer e.generate(b)()
				defer pin(b, p.cpu)()
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				// The loop of asavie/xdp's examples (dumpframes,
				// rebroadcast): refill, wait in poll(), take what
				// arrived. Received frames go back with the next Fill.
				for n := 0; n < b.N; {
					s.Fill(s.GetDescs(s.NumFreeFillSlots(), true))
					var numRx int
					if poll {
						var err error
						if numRx, _, err = s.Poll(-1); err != nil {
							b.Fatal(err)
						}
					} else if numRx = s.NumReceived(); numRx == 0 {
						continue
					}
					n += len(s.Receive(numRx))
				}
				mpps(b, b.N, time.Since(start))
			})
		}
	}
}

func BenchmarkTxOnly(b *testing.B) {
	for _, m := range []int{0, 4} { // default, need_wakeup off
		m := xskModes[m]
		b.Run(m.name, func(b *testing.B) {
			e := newEnv(b)
			arrived := e.dropAtPeer(b)
			s := openXSK(b, e, m.opts)
			frame := e.frame()
			defer pin(b, consumerCPU)()
			b.ReportAllocs()
			b.ResetTimer()
			a0 := arrived()
			start := time.Now()
			if err := xsk.TxOnly(context.Background(), s, frame, xsk.ModeOptions{Frames: uint64(b.N)}); err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			mpps(b, b.N, elapsed)
			outMpps(b, arrived, a0, elapsed)
		})
	}
	b.Run("asavie", func(b *testing.B) {
		e := newEnv(b)
		arrived := e.dropAtPeer(b)
		s := openAsavie(b, e)
		frame := e.frame()
		defer pin(b, consumerCPU)()
		b.ReportAllocs()
		b.ResetTimer()
		a0 := arrived()
		start := time.Now()
		// The loop of asavie/xdp's sendudp example: take free TX frames,
		// write the packet, transmit (sendto inside), reap completions.
		for done := 0; done < b.N; {
			descs := s.GetDescs(s.NumFreeTxSlots(), false)
			for i := range descs {
				descs[i].Len = uint32(copy(s.GetFrame(descs[i]), frame))
			}
			s.Transmit(descs)
			_, numCompleted, err := s.Poll(-1)
			if err != nil {
				b.Fatal(err)
			}
			done += numCompleted
		}
		elapsed := time.Since(start)
		mpps(b, b.N, elapsed)
		outMpps(b, arrived, a0, elapsed)
	})
}

func BenchmarkL2Fwd(b *testing.B) {
	modes := append(xskModes[:4:4], struct {
		name string
		opts xsk.Options
		napi bool
	}{"xsk/default-batch256", xsk.Options{Batch: 256}, false})
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			e := newEnv(b)
			arrived := e.dropAtPeer(b)
			s := openXSK(b, e, m.opts)
			defer e.generate(b)()
			defer pin(b, consumerCPU)()
			b.ReportAllocs()
			b.ResetTimer()
			a0 := arrived()
			start := time.Now()
			if err := xsk.L2Fwd(context.Background(), s, xsk.ModeOptions{Frames: uint64(b.N)}); err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			mpps(b, b.N, elapsed)
			outMpps(b, arrived, a0, elapsed)
		})
	}
	b.Run("asavie/poll", func(b *testing.B) {
		e := newEnv(b)
		arrived := e.dropAtPeer(b)
		s := openAsavie(b, e)
		defer e.generate(b)()
		defer pin(b, consumerCPU)()
		b.ReportAllocs()
		b.ResetTimer()
		a0 := arrived()
		start := time.Now()
		// asavie/xdp has no zero-copy forwarding (Receive frees the RX
		// frame at once), so its l2fwd example copies each frame into a
		// TX frame; this is that loop on one socket.
		for n := 0; n < b.N; {
			s.Fill(s.GetDescs(s.NumFreeFillSlots(), true))
			numRx, _, err := s.Poll(-1)
			if err != nil {
				b.Fatal(err)
			}
			rx := s.Receive(numRx)
			tx := s.GetDescs(len(rx), false)
			for i := range tx {
				in := s.GetFrame(rx[i])
				out := s.GetFrame(tx[i])
				tx[i].Len = uint32(copy(out, in))
				xsk.SwapMACs(out[:tx[i].Len])
			}
			s.Transmit(tx)
			n += len(rx)
		}
		elapsed := time.Since(start)
		mpps(b, b.N, elapsed)
		outMpps(b, arrived, a0, elapsed)
	})
}

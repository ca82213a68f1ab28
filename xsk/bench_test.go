package xsk_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/xsk"
)

// The benchmarks run on a one-queue veth pair: the live-frames generator
// sends 64-byte UDP frames from the peer, on CPU 0, as fast as it can; the
// socket on the host end consumes them on CPU 1 ("other core") or on CPU 0
// too ("same core"). ns/op is per frame; Mpps is reported alongside.
// Frames the consumer is too slow for are dropped by the kernel
// (rx_ring_full), as on real hardware.

const genCPU = 0

// pin locks the calling goroutine to an OS thread on cpu and returns the
// function that undoes it.
func pin(tb testing.TB, cpu int) func() {
	if cpu < 0 {
		return func() {}
	}
	runtime.LockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		tb.Fatal(err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		tb.Fatal(err)
	}
	return func() {
		unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	}
}

// dropAtPeer attaches a native program to the peer that counts and drops
// the frames the socket sends (txonly, l2fwd), and returns a function that
// reads that count: frames that really made it out.
func (e *env) dropAtPeer(tb testing.TB) (arrived func() uint64) {
	spec, err := gen.LoadBasic()
	if err != nil {
		tb.Fatal(err)
	}
	if err := spec.Variables[gen.BasicVarCountVerdict].Set(uint32(gen.BasicVerdictVERDICT_DROP)); err != nil {
		tb.Fatal(err)
	}
	var objs gen.BasicObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { objs.Close() })
	if err := e.veth.InPeerNS(func() error {
		l, err := link.AttachXDP(link.XDPOptions{Program: objs.XdpCount, Interface: e.veth.PeerIndex, Flags: link.XDPDriverMode})
		if err == nil {
			tb.Cleanup(func() { l.Close() })
		}
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return func() uint64 {
		var per []gen.BasicCounter
		if err := objs.Verdicts.Lookup(uint32(gen.BasicVerdictVERDICT_DROP), &per); err != nil {
			tb.Fatal(err)
		}
		var n uint64
		for _, c := range per {
			n += c.Packets
		}
		return n
	}
}

type benchCase struct {
	name string
	opts xsk.Options
	napi bool // set napi_defer_hard_irqs/gro_flush_timeout on the host end
}

func benchCases() []benchCase {
	return []benchCase{
		{name: "default", opts: xsk.Options{}},
		{name: "block", opts: xsk.Options{Wait: xsk.WaitBlock}},
		{name: "poll", opts: xsk.Options{Wait: xsk.WaitPoll}},
		{name: "spin", opts: xsk.Options{Wait: xsk.WaitSpin}},
		{name: "spin-no-need-wakeup", opts: xsk.Options{Wait: xsk.WaitSpin, DisableNeedWakeup: true}},
		{name: "default-no-need-wakeup", opts: xsk.Options{DisableNeedWakeup: true}},
		{name: "block-batch512", opts: xsk.Options{Wait: xsk.WaitBlock, Batch: 512}},
		{name: "poll-batch512", opts: xsk.Options{Wait: xsk.WaitPoll, Batch: 512}},
		{name: "busypoll-spin", opts: xsk.Options{Wait: xsk.WaitSpin, BusyPoll: xsk.BusyPoll{Enable: true}}, napi: true},
	}
}

// cpuTimes reads /proc/stat's per-CPU lines (user nice system idle iowait
// irq softirq steal), for the verbose breakdown of where time went.
func cpuTimes() map[string][]uint64 {
	out := map[string][]uint64{}
	b, _ := os.ReadFile("/proc/stat")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		for _, x := range f[1:9] {
			v, _ := strconv.ParseUint(x, 10, 64)
			out[f[0]] = append(out[f[0]], v)
		}
	}
	return out
}

func cpuDelta(a, b map[string][]uint64) string {
	var sb strings.Builder
	names := []string{"user", "nice", "sys", "idle", "iowait", "irq", "softirq", "steal"}
	for _, c := range []string{"cpu0", "cpu1"} {
		fmt.Fprintf(&sb, "%s:", c)
		for i, n := range names {
			if d := b[c][i] - a[c][i]; d > 0 {
				fmt.Fprintf(&sb, " %s=%d", n, d)
			}
		}
		sb.WriteString("; ")
	}
	return sb.String()
}

func (e *env) offered(b *testing.B) uint64 {
	c, err := e.red.Counters()
	if err != nil {
		b.Fatal(err)
	}
	return c[0].Redirected.Packets + c[0].Passed.Packets + c[0].Dropped.Packets
}

func report(b *testing.B, s *xsk.Socket, before xsk.Stats, elapsed time.Duration, frames uint64) {
	after, err := s.Stats()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(frames)/elapsed.Seconds()/1e6, "Mpps")
	if n := after.RxFrames - before.RxFrames; n > 0 {
		full := after.Kernel.RxRingFull - before.Kernel.RxRingFull
		b.ReportMetric(float64(full)/float64(n+full)*100, "%ringfull")
		b.ReportMetric(float64(after.RxWakeups+after.Polls+after.TxKicks-before.RxWakeups-before.Polls-before.TxKicks)/float64(n), "syscalls/frame")
		b.ReportMetric(float64(after.Kernel.RxDropped-before.Kernel.RxDropped)/float64(n), "rxdropped/frame")
	}
}

func BenchmarkRxDrop(b *testing.B) {
	for _, cpu := range []struct {
		name string
		cpu  int
	}{{"other-core", 1}, {"same-core", genCPU}, {"unpinned", -1}} {
		for _, c := range benchCases() {
			b.Run(fmt.Sprintf("%s/%s", c.name, cpu.name), func(b *testing.B) {
				e := newEnv(b, 1, xsk.RedirectOptions{})
				if c.napi {
					prev, err := xsk.SetNAPIDefer(e.veth.Name, xsk.RecommendedNAPIDefer())
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { xsk.SetNAPIDefer(e.veth.Name, prev) })
				}
				s := e.open(b, c.opts)
				stop := e.generate(b, genCPU, e.udp(1000, 2000, 0, 18))
				defer stop()
				defer pin(b, cpu.cpu)()
				time.Sleep(20 * time.Millisecond) // let the generator start
				before, _ := s.Stats()
				offered := e.offered(b)
				ct := cpuTimes()
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				if err := xsk.RxDrop(context.Background(), s, xsk.ModeOptions{Frames: uint64(b.N)}); err != nil {
					b.Fatal(err)
				}
				elapsed := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(e.offered(b)-offered)/elapsed.Seconds()/1e6, "offered-Mpps")
				if testing.Verbose() {
					st, _ := s.Stats()
					b.Logf("accounting %+v\nstats %+v\n%s", s.Accounting(), st, cpuDelta(ct, cpuTimes()))
				}
				report(b, s, before, elapsed, uint64(b.N))
			})
		}
	}
}

func BenchmarkL2Fwd(b *testing.B) {
	for _, c := range append(benchCases()[:4], benchCase{name: "default-batch256", opts: xsk.Options{Batch: 256}}) {
		b.Run(c.name+"/other-core", func(b *testing.B) {
			e := newEnv(b, 1, xsk.RedirectOptions{})
			arrived := e.dropAtPeer(b)
			s := e.open(b, c.opts)
			stop := e.generate(b, genCPU, e.udp(1000, 2000, 0, 18))
			defer stop()
			defer pin(b, 1)()
			time.Sleep(20 * time.Millisecond)
			before, _ := s.Stats()
			b.ReportAllocs()
			b.ResetTimer()
			a0 := arrived()
			start := time.Now()
			if err := xsk.L2Fwd(context.Background(), s, xsk.ModeOptions{Frames: uint64(b.N)}); err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			report(b, s, before, elapsed, uint64(b.N))
			b.ReportMetric(float64(arrived()-a0)/elapsed.Seconds()/1e6, "out-Mpps")
			if testing.Verbose() {
				st, _ := s.Stats()
				b.Logf("stats %+v", st)
			}
		})
	}
}

func BenchmarkTxOnly(b *testing.B) {
	for _, c := range []benchCase{{name: "default"}, {name: "no-need-wakeup", opts: xsk.Options{DisableNeedWakeup: true}}} {
		b.Run(c.name, func(b *testing.B) {
			e := newEnv(b, 1, xsk.RedirectOptions{})
			arrived := e.dropAtPeer(b)
			s := e.open(b, c.opts)
			frame := e.udp(1000, 2000, 0, 18)
			defer pin(b, 1)()
			before, _ := s.Stats()
			b.ReportAllocs()
			b.ResetTimer()
			a0 := arrived()
			start := time.Now()
			if err := xsk.TxOnly(context.Background(), s, frame, xsk.ModeOptions{Frames: uint64(b.N)}); err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			report(b, s, before, elapsed, uint64(b.N))
			b.ReportMetric(float64(arrived()-a0)/elapsed.Seconds()/1e6, "out-Mpps")
			if testing.Verbose() {
				st, _ := s.Stats()
				b.Logf("stats %+v", st)
			}
		})
	}
}

package capture_test

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/xdpdrop/xdpdrop/capture"
	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/pcapng"
	"github.com/xdpdrop/xdpdrop/pktgen"
)

// BenchmarkCaptureVeth measures what a capture costs the native drop rate
// on a veth pair (the live-frames generator in the peer namespace sends
// 64-byte UDP frames, every one dropped by a compound rule), side by side
// in each iteration: no capture, a capture of 1 in 1000 dropped frames,
// and a capture of every frame, whose reader turns each sample into a
// pcapng block (into io.Discard); for the last, "all-captured-Mpps" is
// the rate the capture sustained and "all-lost" the share of samples the
// full ring lost. Run with -benchtime 1x or more; each run lasts
// vethSeconds.
func BenchmarkCaptureVeth(b *testing.B) {
	const vethSeconds = 3
	veth := testenv.NewVeth(b, testenv.VethOptions{})
	rs, err := fastdrop.Parse(strings.NewReader("drop udp dport 9\n"), "bench")
	if err != nil {
		b.Fatal(err)
	}
	e, err := fastdrop.New(fastdrop.Options{MaxRules: 64, IPv4Blocks: 16, IPv4HostBlocks: 16, IPv6Entries: 64})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	if err := e.Apply(rs); err != nil {
		b.Fatal(err)
	}
	m, err := capture.MapsOf(e.Maps())
	if err != nil {
		b.Fatal(err)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: e.Program(), Interface: veth.Index, Flags: link.XDPDriverMode})
	if err != nil {
		testenv.SkipOrFail(b, "attach XDP in driver mode to veth: %v", err)
	}
	defer l.Close()
	g, err := pktgen.New(pktgen.Options{Flows: 256, L4Checksum: 6})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	f := frames.UDP4("198.18.0.2", "198.18.0.1", 1024, 9, 18).Bytes
	frame := append(f, make([]byte, 64-len(f))...)

	dropped := func() uint64 {
		c, err := e.Counters()
		if err != nil {
			b.Fatal(err)
		}
		return c.Drop.Packets
	}
	// measure runs the generator with sel registered (nil: none) and a
	// reader draining the ring; it returns the drop rate and the
	// capture's counts.
	measure := func(sel *capture.Selection) (mpps float64, st capture.Stats, got uint64) {
		var c *capture.Capture
		var wg sync.WaitGroup
		if sel != nil {
			if c, err = capture.Start(m, *sel); err != nil {
				b.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				w, _ := pcapng.NewWriter(io.Discard, pcapng.WriterOptions{})
				id, _ := w.AddInterface(pcapng.Interface{Name: veth.Name, LinkType: pcapng.LinkEthernet})
				var s capture.Sample
				for {
					err := c.Read(time.Time{}, &s)
					if errors.Is(err, capture.ErrClosed) {
						return
					}
					if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
						b.Error(err)
						return
					}
					got++
					_ = w.WritePacket(pcapng.Packet{Interface: id, Time: s.Time, Length: s.Length, Data: s.Data,
						Comments: []string{"verdict=drop rule=1"}, HasQueue: true, Queue: uint32(s.Queue)})
				}
			}()
		}
		before := dropped()
		start := time.Now()
		err := veth.InPeerNS(func() error {
			_, err := g.Run(context.Background(), veth.PeerIndex, frame, pktgen.RunOptions{Duration: vethSeconds * time.Second})
			return err
		})
		if err != nil {
			b.Fatalf("generator: %v", err)
		}
		el := time.Since(start).Seconds()
		mpps = float64(dropped()-before) / el / 1e6
		if c != nil {
			time.Sleep(200 * time.Millisecond) // the reader catches up
			if st, err = c.Stats(); err != nil {
				b.Fatal(err)
			}
			c.Close()
			wg.Wait()
		}
		return mpps, st, got
	}
	var none, sampled, all, allCaptured, allLost []float64
	b.ResetTimer()
	for range b.N {
		r, _, _ := measure(nil)
		none = append(none, r)
		r, st, _ := measure(&capture.Selection{Verdicts: capture.VerdictDrop, Every: 1000})
		sampled = append(sampled, r)
		b.Logf("1/1000: seen %d sent %d lost %d", st.Seen, st.Sent, st.Lost)
		r, st, got := measure(&capture.Selection{Verdicts: capture.VerdictDrop})
		all = append(all, r)
		allCaptured = append(allCaptured, float64(got)/vethSeconds/1e6)
		allLost = append(allLost, float64(st.Lost)/float64(max(st.Seen, 1)))
		b.Logf("every frame: seen %d sent %d lost %d read %d", st.Seen, st.Sent, st.Lost, got)
	}
	b.StopTimer()
	med := func(s []float64) float64 { s = slices.Clone(s); slices.Sort(s); return s[len(s)/2] }
	b.ReportMetric(med(none), "none-Mpps")
	b.ReportMetric(med(sampled), "1in1000-Mpps")
	b.ReportMetric(med(sampled)/med(none), "1in1000-x-none")
	b.ReportMetric(med(all), "all-Mpps")
	b.ReportMetric(med(allCaptured), "all-captured-Mpps")
	b.ReportMetric(med(allLost), "all-lost")
}

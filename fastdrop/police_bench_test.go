package fastdrop

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// BenchmarkLimitCost measures what a limit rule costs a frame over the
// same rule with drop, A/B: the programs take turns, rounds times, in one
// run (the machine is shared), and the medians are reported, in ns per
// frame of BPF_PROG_TEST_RUN with warm caches. Every frame after the
// burst exceeds: the flood's path. go test -run '^$' -bench LimitCost
// ./fastdrop/
func BenchmarkLimitCost(b *testing.B) {
	testenv.RequireRoot(b)
	cases := []struct{ name, rules string }{
		{"drop", "drop udp dport 53\n"},
		{"limit aggregate", "limit 1000/s udp dport 53\n"},
		{"limit per src", "limit 1000/s per src udp dport 53\n"},
		{"limit per src/24 bytes", "limit 1mbit/s per src/24 udp dport 53\n"},
		{"banned source", "limit 1/s burst 1 per src ban 1h udp dport 53\n"},
		{"drop, bans listed, not banned", "limit 1/s burst 1 per src ban 1h udp dport 54\ndrop udp dport 53\n"},
	}
	frame := frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 53, 18).Bytes
	opts := testOptions
	engines := make([]*Engine, len(cases))
	for i, c := range cases {
		e, err := New(opts)
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		if err := e.Apply(kParse(b, c.rules)); err != nil {
			b.Fatal(err)
		}
		engines[i] = e
	}
	const rounds, n = 7, 2_000_000
	ns := make([][]float64, len(cases))
	for range b.N {
		for r := 0; r < rounds; r++ {
			for i, e := range engines {
				_, d, err := e.prog.Benchmark(frame, n, nil)
				if err != nil {
					b.Fatal(err)
				}
				ns[i] = append(ns[i], float64(d.Nanoseconds()))
			}
		}
	}
	var out strings.Builder
	med := make([]float64, len(cases))
	for i := range cases {
		s := slices.Clone(ns[i])
		slices.Sort(s)
		med[i] = s[len(s)/2]
	}
	for i, c := range cases {
		fmt.Fprintf(&out, "%-32s %6.1f ns  (%+.1f ns over drop; rounds %v)\n", c.name, med[i], med[i]-med[0], ns[i])
		b.ReportMetric(med[i], strings.ReplaceAll(c.name, " ", "_")+"-ns")
	}
	b.Log("\n" + out.String())
}

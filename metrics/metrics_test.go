package metrics

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/xsk"
)

type fakeDrop struct {
	c   *fastdrop.Counters
	err error
}

func (f fakeDrop) Counters() (*fastdrop.Counters, error) { return f.c, f.err }

// gather returns every sample as "name{label=value,...}" -> value.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName() + "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetName() + "=" + l.GetValue()
			}
			key += "}"
			out[key] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func TestDropCollector(t *testing.T) {
	rule := func(text string) fastdrop.Rule {
		rs, err := fastdrop.Parse(strings.NewReader(text), "t")
		require.NoError(t, err)
		return rs.Rules[0]
	}
	cs := &fastdrop.Counters{
		Drop: fastdrop.Counter{Packets: 30, Bytes: 1920}, Pass: fastdrop.Counter{Packets: 5, Bytes: 300},
		Malformed: fastdrop.Counter{Packets: 1, Bytes: 10}, Default: fastdrop.Counter{Packets: 4, Bytes: 240},
		Rules: []fastdrop.RuleCounter{
			{Index: 0, Rule: rule("drop udp dport 11211"), Counter: fastdrop.Counter{Packets: 20, Bytes: 1280}},
			{Index: 1, Rule: rule("drop src 192.0.2.0/24"), Counter: fastdrop.Counter{Packets: 10, Bytes: 640}},
			{Index: 2, Rule: rule("drop src 198.51.100.0/24"), Counter: fastdrop.Counter{Packets: 0}},
			{Index: 3, Rule: fastdrop.PrefixRules(fastdrop.ActionPass, []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32")})[0], Counter: fastdrop.Counter{Packets: 1, Bytes: 64}},
		},
	}
	c := NewDropCollector(2)
	c.Set("eth3", fakeDrop{c: cs})
	c.Set("eth4", fakeDrop{err: errors.New("gone")})
	got := gather(t, c)

	require.Equal(t, 30.0, got["xdpdrop_packets_total{interface=eth3,verdict=drop}"])
	require.Equal(t, 300.0, got["xdpdrop_bytes_total{interface=eth3,verdict=pass}"])
	require.Equal(t, 1.0, got["xdpdrop_packets_total{interface=eth3,verdict=malformed}"])
	require.Equal(t, 20.0, got["xdpdrop_rule_packets_total{action=drop,interface=eth3,rule=drop udp dport 11211}"])
	require.Equal(t, 10.0, got["xdpdrop_rule_packets_total{action=drop,interface=eth3,rule=drop src 192.0.2.0/24}"])
	// The limit of 2 series keeps the two busiest; the quiet rule and the
	// one beyond the limit are not exported, and the omission is counted.
	_, ok := got["xdpdrop_rule_packets_total{action=pass,interface=eth3,rule=pass src 192.0.2.1/32}"]
	require.False(t, ok)
	_, ok = got["xdpdrop_rule_packets_total{action=drop,interface=eth3,rule=drop src 198.51.100.0/24}"]
	require.False(t, ok, "rules that matched nothing make no series")
	require.Equal(t, 1.0, got["xdpdrop_rule_series_omitted{interface=eth3}"])
	require.Equal(t, 1.0, got["xdpdrop_rules{interface=eth3,kind=compound}"])
	require.Equal(t, 3.0, got["xdpdrop_rules{interface=eth3,kind=prefix}"])
	require.Equal(t, 1.0, got["xdpdrop_counters_up{interface=eth3}"])
	require.Equal(t, 0.0, got["xdpdrop_counters_up{interface=eth4}"])

	c.Set("eth3", nil)
	got = gather(t, c)
	_, ok = got["xdpdrop_packets_total{interface=eth3,verdict=drop}"]
	require.False(t, ok, "a removed interface is no longer exported")
}

type fakeQueues []xsk.QueueCounters

func (f fakeQueues) Counters() ([]xsk.QueueCounters, error) { return f, nil }

type fakeSocket xsk.Stats

func (f fakeSocket) Stats() (xsk.Stats, error) { return xsk.Stats(f), nil }

func TestXSKCollector(t *testing.T) {
	c := NewXSKCollector()
	c.SetProgram("eth3", fakeQueues{{Queue: 1, Redirected: xsk.Counter{Packets: 7, Bytes: 448}, Passed: xsk.Counter{Packets: 2}}})
	c.SetSocket("eth3", 1, fakeSocket{RxFrames: 7, Kernel: xsk.KernelStats{RxRingFull: 3}})
	got := gather(t, c)
	require.Equal(t, 7.0, got["xdpdrop_queue_packets_total{interface=eth3,queue=1,verdict=redirect}"])
	require.Equal(t, 448.0, got["xdpdrop_queue_bytes_total{interface=eth3,queue=1,verdict=redirect}"])
	require.Equal(t, 2.0, got["xdpdrop_queue_packets_total{interface=eth3,queue=1,verdict=pass}"])
	require.Equal(t, 7.0, got["xdpdrop_xsk_total{counter=rx_frames,interface=eth3,queue=1}"])
	require.Equal(t, 3.0, got["xdpdrop_xsk_total{counter=rx_ring_full,interface=eth3,queue=1}"])
}

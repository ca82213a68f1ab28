package metrics

import (
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdpdrop/xdpdrop/capture"
	"github.com/xdpdrop/xdpdrop/fastdrop"
)

// DefaultMaxRuleSeries is how many per-rule series an interface exports
// unless told otherwise.
const DefaultMaxRuleSeries = 1000

// DropCounters is what DropCollector reads: *fastdrop.Engine.
type DropCounters interface {
	Counters() (*fastdrop.Counters, error)
}

// DropCollector exports the counters of fast-drop engines, one per
// interface. Its methods are safe for concurrent use.
type DropCollector struct {
	maxRules int

	mu      sync.Mutex
	sources map[string]DropCounters

	packets, bytes           *prometheus.Desc
	rulePackets, ruleBytes   *prometheus.Desc
	rules, omitted, scrapeOK *prometheus.Desc
	// Limit rules: frames and bytes by result (conform, exceed), bans.
	limitPackets, limitBytes, limitBans, limitEvicted *prometheus.Desc
	// Samples of rules' sample modifiers (package capture), by result.
	ruleSamples *prometheus.Desc
}

// NewDropCollector returns a collector with no interfaces. maxRuleSeries
// <= 0 means DefaultMaxRuleSeries.
func NewDropCollector(maxRuleSeries int) *DropCollector {
	if maxRuleSeries <= 0 {
		maxRuleSeries = DefaultMaxRuleSeries
	}
	return &DropCollector{
		maxRules: maxRuleSeries,
		sources:  make(map[string]DropCounters),
		packets: prometheus.NewDesc("xdpdrop_packets_total",
			"Frames judged by fast drop, by verdict (drop, pass) and by what decided it (malformed, default policy).",
			[]string{"interface", "verdict"}, nil),
		bytes: prometheus.NewDesc("xdpdrop_bytes_total",
			"Bytes of the frames judged by fast drop (Ethernet header to end of frame), by verdict.",
			[]string{"interface", "verdict"}, nil),
		rulePackets: prometheus.NewDesc("xdpdrop_rule_packets_total",
			"Frames a fast-drop rule matched; only rules that matched something, busiest first.",
			[]string{"interface", "rule", "action"}, nil),
		ruleBytes: prometheus.NewDesc("xdpdrop_rule_bytes_total",
			"Bytes of the frames a fast-drop rule matched.",
			[]string{"interface", "rule", "action"}, nil),
		rules: prometheus.NewDesc("xdpdrop_rules",
			"Rules in force, by kind (compound or prefix).",
			[]string{"interface", "kind"}, nil),
		omitted: prometheus.NewDesc("xdpdrop_rule_series_omitted",
			"Rules that matched something but were left out of the per-rule series by the limit.",
			[]string{"interface"}, nil),
		limitPackets: prometheus.NewDesc("xdpdrop_limit_packets_total",
			"Frames a limit rule matched, by result: conform (passed) or exceed (dropped).",
			[]string{"interface", "rule", "result"}, nil),
		limitBytes: prometheus.NewDesc("xdpdrop_limit_bytes_total",
			"Bytes of the frames a limit rule matched, by result: conform or exceed.",
			[]string{"interface", "rule", "result"}, nil),
		limitBans: prometheus.NewDesc("xdpdrop_limit_bans_total",
			"Sources a limit rule banned.",
			[]string{"interface", "rule"}, nil),
		limitEvicted: prometheus.NewDesc("xdpdrop_limit_evictions_total",
			"Per-source buckets a limit rule's new sources took from other sources (the table of buckets was full where they belong).",
			[]string{"interface", "rule"}, nil),
		ruleSamples: prometheus.NewDesc("xdpdrop_rule_samples_total",
			"Frames that rules' sample modifiers sent to the program's ring of rule samples, by result: sent, or lost (the ring was full: no one read it in time).",
			[]string{"interface", "result"}, nil),
		scrapeOK: prometheus.NewDesc("xdpdrop_counters_up",
			"1 if the interface's counters could be read at this scrape, else 0.",
			[]string{"interface"}, nil),
	}
}

// Set exports src's counters as interface iface; a nil src removes it.
func (c *DropCollector) Set(iface string, src DropCounters) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if src == nil {
		delete(c.sources, iface)
		return
	}
	c.sources[iface] = src
}

// Describe implements prometheus.Collector.
func (c *DropCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.packets, c.bytes, c.rulePackets, c.ruleBytes, c.rules, c.omitted, c.scrapeOK, c.limitPackets, c.limitBytes, c.limitBans, c.limitEvicted, c.ruleSamples} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *DropCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sources := make(map[string]DropCounters, len(c.sources))
	for k, v := range c.sources {
		sources[k] = v
	}
	c.mu.Unlock()

	for iface, src := range sources {
		cs, err := src.Counters()
		if err != nil {
			ch <- prometheus.MustNewConstMetric(c.scrapeOK, prometheus.GaugeValue, 0, iface)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.scrapeOK, prometheus.GaugeValue, 1, iface)
		c.collectOne(ch, iface, cs)
		c.collectSamples(ch, iface, src)
	}
}

// collectSamples exports the rule samples' counts of a source that has
// the program's maps (a fastdrop.Engine); others have none to export.
func (c *DropCollector) collectSamples(ch chan<- prometheus.Metric, iface string, src DropCounters) {
	ms, ok := src.(interface{ Maps() map[string]*ebpf.Map })
	if !ok {
		return
	}
	m, err := capture.MapsOf(ms.Maps())
	if err != nil {
		return
	}
	st, err := capture.RuleSampleStats(m)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.ruleSamples, prometheus.CounterValue, float64(st.Sent), iface, "sent")
	ch <- prometheus.MustNewConstMetric(c.ruleSamples, prometheus.CounterValue, float64(st.Lost), iface, "lost")
}

func (c *DropCollector) collectOne(ch chan<- prometheus.Metric, iface string, cs *fastdrop.Counters) {
	for _, v := range []struct {
		name string
		c    fastdrop.Counter
	}{{"drop", cs.Drop}, {"pass", cs.Pass}, {"malformed", cs.Malformed}, {"default", cs.Default}, {"banned", cs.Banned}} {
		ch <- prometheus.MustNewConstMetric(c.packets, prometheus.CounterValue, float64(v.c.Packets), iface, v.name)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(v.c.Bytes), iface, v.name)
	}
	var compound, prefix int
	hit := make([]fastdrop.RuleCounter, 0, 64)
	for _, r := range cs.Rules {
		if r.Rule.IsPrefixOnly() {
			prefix++
		} else {
			compound++
		}
		if r.Packets > 0 {
			hit = append(hit, r)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.rules, prometheus.GaugeValue, float64(compound), iface, "compound")
	ch <- prometheus.MustNewConstMetric(c.rules, prometheus.GaugeValue, float64(prefix), iface, "prefix")
	omitted := 0
	if len(hit) > c.maxRules {
		slices.SortFunc(hit, func(a, b fastdrop.RuleCounter) int {
			switch {
			case a.Packets > b.Packets:
				return -1
			case a.Packets < b.Packets:
				return 1
			}
			return a.Index - b.Index
		})
		omitted = len(hit) - c.maxRules
		hit = hit[:c.maxRules]
	}
	ch <- prometheus.MustNewConstMetric(c.omitted, prometheus.GaugeValue, float64(omitted), iface)
	for _, r := range hit {
		text, action := r.Rule.String(), r.Rule.Action.String()
		ch <- prometheus.MustNewConstMetric(c.rulePackets, prometheus.CounterValue, float64(r.Packets), iface, text, action)
		ch <- prometheus.MustNewConstMetric(c.ruleBytes, prometheus.CounterValue, float64(r.Bytes), iface, text, action)
		if l := r.Limit; l != nil {
			for _, x := range []struct {
				result string
				c      fastdrop.Counter
			}{{"conform", l.Conform}, {"exceed", l.Exceed}} {
				ch <- prometheus.MustNewConstMetric(c.limitPackets, prometheus.CounterValue, float64(x.c.Packets), iface, text, x.result)
				ch <- prometheus.MustNewConstMetric(c.limitBytes, prometheus.CounterValue, float64(x.c.Bytes), iface, text, x.result)
			}
			ch <- prometheus.MustNewConstMetric(c.limitBans, prometheus.CounterValue, float64(l.Bans), iface, text)
			ch <- prometheus.MustNewConstMetric(c.limitEvicted, prometheus.CounterValue, float64(l.Evicted), iface, text)
		}
	}
}

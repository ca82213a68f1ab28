package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdpdrop/xdpdrop/xsk"
)

// QueueCounters is what XSKCollector reads from the redirect program:
// *xsk.Redirect.
type QueueCounters interface {
	Counters() ([]xsk.QueueCounters, error)
}

// SocketStats is what XSKCollector reads from a socket: *xsk.Socket.
type SocketStats interface {
	Stats() (xsk.Stats, error)
}

// XSKCollector exports the redirect program's per-queue verdicts and the
// statistics of AF_XDP sockets, per interface and queue. Its methods are
// safe for concurrent use.
type XSKCollector struct {
	mu       sync.Mutex
	programs map[string]QueueCounters
	sockets  map[socketKey]SocketStats

	verdicts, verdictBytes *prometheus.Desc
	socket                 *prometheus.Desc
}

type socketKey struct {
	iface string
	queue int
}

// NewXSKCollector returns an empty collector.
func NewXSKCollector() *XSKCollector {
	return &XSKCollector{
		programs: make(map[string]QueueCounters),
		sockets:  make(map[socketKey]SocketStats),
		verdicts: prometheus.NewDesc("xdpdrop_queue_packets_total",
			"Frames the redirect program judged, by rx queue and verdict (redirect, pass, drop, aborted).",
			[]string{"interface", "queue", "verdict"}, nil),
		verdictBytes: prometheus.NewDesc("xdpdrop_queue_bytes_total",
			"Bytes of the frames the redirect program judged, by rx queue and verdict.",
			[]string{"interface", "queue", "verdict"}, nil),
		socket: prometheus.NewDesc("xdpdrop_xsk_total",
			"AF_XDP socket counters by queue: the kernel's XDP_STATISTICS (rx_dropped, rx_invalid_descs, tx_invalid_descs, rx_ring_full, rx_fill_ring_empty_descs, tx_ring_empty_descs) and the socket's own (rx_frames, rx_bytes, tx_frames, tx_bytes, completed, tx_dropped).",
			[]string{"interface", "queue", "counter"}, nil),
	}
}

// SetProgram exports the redirect program's counters for iface (nil removes).
func (c *XSKCollector) SetProgram(iface string, p QueueCounters) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p == nil {
		delete(c.programs, iface)
		return
	}
	c.programs[iface] = p
}

// SetSocket exports the statistics of the socket on iface's queue (nil removes).
func (c *XSKCollector) SetSocket(iface string, queue int, s SocketStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := socketKey{iface, queue}
	if s == nil {
		delete(c.sockets, k)
		return
	}
	c.sockets[k] = s
}

// Describe implements prometheus.Collector.
func (c *XSKCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.verdicts
	ch <- c.verdictBytes
	ch <- c.socket
}

// Collect implements prometheus.Collector.
func (c *XSKCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for iface, p := range c.programs {
		qs, err := p.Counters()
		if err != nil {
			continue
		}
		for _, q := range qs {
			queue := strconv.Itoa(q.Queue)
			for _, v := range []struct {
				name string
				c    xsk.Counter
			}{{"redirect", q.Redirected}, {"pass", q.Passed}, {"drop", q.Dropped}, {"aborted", q.Aborted}} {
				ch <- prometheus.MustNewConstMetric(c.verdicts, prometheus.CounterValue, float64(v.c.Packets), iface, queue, v.name)
				ch <- prometheus.MustNewConstMetric(c.verdictBytes, prometheus.CounterValue, float64(v.c.Bytes), iface, queue, v.name)
			}
		}
	}
	for k, s := range c.sockets {
		st, err := s.Stats()
		if err != nil {
			continue
		}
		queue := strconv.Itoa(k.queue)
		for _, v := range []struct {
			name string
			n    uint64
		}{
			{"rx_dropped", st.Kernel.RxDropped},
			{"rx_invalid_descs", st.Kernel.RxInvalidDescs},
			{"tx_invalid_descs", st.Kernel.TxInvalidDescs},
			{"rx_ring_full", st.Kernel.RxRingFull},
			{"rx_fill_ring_empty_descs", st.Kernel.RxFillRingEmptyDescs},
			{"tx_ring_empty_descs", st.Kernel.TxRingEmptyDescs},
			{"rx_frames", st.RxFrames},
			{"rx_bytes", st.RxBytes},
			{"tx_frames", st.TxFrames},
			{"tx_bytes", st.TxBytes},
			{"completed", st.Completed},
			{"tx_dropped", st.TxDropped},
		} {
			ch <- prometheus.MustNewConstMetric(c.socket, prometheus.CounterValue, float64(v.n), k.iface, queue, v.name)
		}
	}
}

package benchmark

import (
	"slices"
	"time"
)

// Report is the outcome of Run.
type Report struct {
	Machine  Machine   `json:"machine"`
	Settings Settings  `json:"settings"`
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"` // the whole run, setup included
	// LoadAvg is the 1-minute load average when the run started (a slow
	// average: each row's OtherCPUPct says what other work really took).
	LoadAvg float64 `json:"load_avg_1m"`
	// LoadAvgEnd is the same when the run ended (it includes the run's
	// own generator and application, about 1 to 2).
	LoadAvgEnd float64 `json:"load_avg_1m_end"`
	// Notes say what a reader needs to know to read the figures, such
	// as CPUs shared by the generator and the receiver.
	Notes   []string `json:"notes"`
	Results []Result `json:"results"`
}

// Settings are the options a report was measured with.
type Settings struct {
	WarmupSeconds   float64 `json:"warmup_seconds"`
	DurationSeconds float64 `json:"duration_seconds"`
	Repeat          int     `json:"repeat"`
	CPUs            []int   `json:"cpus"`
	Flows           uint32  `json:"flows"`
	Wait            string  `json:"wait"`
	Batch           int     `json:"batch"`
	Generator       string  `json:"generator"`
	// XDPSock is the xdpsock binary of the xdpsock rows, if any.
	XDPSock string `json:"xdpsock,omitempty"`
	// Interfaces is "sandbox" (a fresh veth pair per case) or
	// "HOST/PEER".
	Interfaces string `json:"interfaces"`
}

// Result is one measured row.
type Result struct {
	Case
	Name string `json:"name"`
	// Mpps summarizes the rate of the repeats in millions of frames per
	// second: frames dropped (drop kinds), received by the socket
	// (rxdrop), or arrived at the other end (txonly, l2fwd).
	Mpps    Summary   `json:"mpps"`
	Samples []float64 `json:"samples_mpps"`
	// OfferedMpps is the rate at which frames were offered: by the
	// generator into the host end's ring, or by the txonly socket. A row
	// whose Mpps is as high is limited by what was offered, not by what
	// it measures. Zero when unknown (a peer that is not veth).
	OfferedMpps Summary `json:"offered_mpps"`
	// GeneratorIdlePct is the share of the generator's CPU's time in
	// which nothing ran on it, in percent (median of the windows): the
	// live-frames generator slept, waiting for the kernel (RCU grace
	// periods), while it could have sent. Absent without a generator
	// (txonly).
	GeneratorIdlePct *float64 `json:"generator_idle_pct,omitempty"`
	// GeneratorBound is set when the row took everything the generator
	// offered (Mpps at least 98% of OfferedMpps): its rate is the
	// generator's, and what it measures could go faster.
	GeneratorBound bool `json:"generator_bound"`

	// Totals from the start of the traffic to its end, after the rings
	// drained (warm-up included), so that every frame is accounted for:
	// Sent = Received + the Lost entries + Unaccounted, and for l2fwd
	// Sent = Forwarded + the Lost entries + Unaccounted.
	//
	// Sent is what the generator offered (0 when unknown) or, for
	// txonly, what the socket sent; Received is what reached the
	// measured stage: the drop program, the socket (rxdrop, l2fwd), the
	// other end (txonly).
	Sent      uint64 `json:"sent"`
	Received  uint64 `json:"received"`
	Forwarded uint64 `json:"forwarded,omitempty"` // l2fwd: sent back and arrived at the peer
	// AppReceived is what an external application said it received
	// (xdpsock rows: its own rx count), next to Received, which counts
	// the frames its program put on the socket's RX ring.
	AppReceived uint64 `json:"app_received,omitempty"`
	Lost        []Loss `json:"lost"`
	// Unaccounted is what no counter explains: frames still in flight
	// when the counters were read, or (negative) frames the ends sent by
	// themselves. It stays within a few frames.
	Unaccounted int64 `json:"unaccounted"`
	// SyscallsPerFrame is how many system calls the AF_XDP socket made
	// per frame it received (per frame sent for txonly): what
	// need_wakeup and busy polling change. 0 for the drop kinds.
	SyscallsPerFrame float64 `json:"syscalls_per_frame"`

	// OtherCPUPct is the share of the machine's CPU time that other work
	// (anything but the case's own process, generator and network kernel
	// threads) used during the measured windows, in percent of all CPUs:
	// the worst window. More than a few percent disturbs the figures.
	OtherCPUPct float64 `json:"other_cpu_pct"`
	// StealPct is the share the hypervisor gave to other guests (steal
	// time), the worst window.
	StealPct float64 `json:"steal_pct"`

	// Note says something the figures alone do not, such as
	// "generator-bound" (see GeneratorBound) or, for txonly, "kept up with
	// the sender": everything the socket sent arrived.
	Note string `json:"note,omitempty"`
	// Error is why the case could not be measured; the figures are then
	// empty.
	Error string `json:"error,omitempty"`
}

// Loss is a number of frames lost at one place, for one reason.
type Loss struct {
	Cause  Cause  `json:"cause"`
	Where  string `json:"where"` // Cause.Describe()
	Frames uint64 `json:"frames"`
}

// Cause names where frames were lost. The values are stable (they are JSON).
type Cause string

// The causes of loss Run tells apart.
const (
	// LossVethRingFull: the host end's ring (veth's ptr_ring, 256
	// frames) had no room when the generator's XDP_TX put a frame in:
	// the receiver fell behind.
	LossVethRingFull Cause = "veth_ring_full"
	// LossPassed: fast drop's rules let the frame through.
	LossPassed Cause = "passed"
	// LossToStack: the redirect program handed the frame to the kernel
	// stack (no socket on its queue).
	LossToStack Cause = "to_stack"
	// LossRxRingFull: the socket's RX ring was full (XDP_STATISTICS
	// rx_ring_full): the application fell behind.
	LossRxRingFull Cause = "rx_ring_full"
	// LossRxDropped: the kernel dropped the frame for the socket for
	// another reason, chiefly an empty fill ring (XDP_STATISTICS
	// rx_dropped).
	LossRxDropped Cause = "rx_dropped"
	// LossLeftOnRing: the frame was still on the socket's RX ring when
	// the application stopped.
	LossLeftOnRing Cause = "left_on_rx_ring"
	// LossAppTxDropped: the application gave up on a frame because the TX
	// ring stayed full.
	LossAppTxDropped Cause = "app_tx_dropped"
	// LossTxInvalid: the kernel rejected a TX descriptor.
	LossTxInvalid Cause = "tx_invalid"
	// LossVethTxDropped: the sending veth end dropped the frame (the
	// receiving end's ring was full).
	LossVethTxDropped Cause = "veth_tx_dropped"
	// LossNotSentBack: l2fwd received the frame but had not sent it back
	// when the loop stopped.
	LossNotSentBack Cause = "not_sent_back"
)

// Describe says in a few words what the cause means.
func (c Cause) Describe() string {
	switch c {
	case LossVethRingFull:
		return "veth ring full before XDP (the receiver fell behind the generator)"
	case LossPassed:
		return "passed by the rules"
	case LossToStack:
		return "handed to the stack by the redirect program (no socket)"
	case LossRxRingFull:
		return "AF_XDP rx ring full (XDP_STATISTICS rx_ring_full)"
	case LossRxDropped:
		return "AF_XDP rx_dropped: no free frame on the fill ring, the application fell behind (XDP_STATISTICS)"
	case LossLeftOnRing:
		return "left on the AF_XDP rx ring when the application stopped"
	case LossAppTxDropped:
		return "TX ring full, dropped by the application"
	case LossTxInvalid:
		return "AF_XDP invalid TX descriptors"
	case LossVethTxDropped:
		return "dropped by veth on the way (tx_dropped: the receiver's ring was full)"
	case LossNotSentBack:
		return "received, not sent back when the loop stopped"
	}
	return string(c)
}

// LostTotal sums the losses.
func (r Result) LostTotal() uint64 {
	var n uint64
	for _, l := range r.Lost {
		n += l.Frames
	}
	return n
}

// Summary describes repeated measurements.
type Summary struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// SpreadPct is (Max-Min)/Median in percent.
	SpreadPct float64 `json:"spread_pct"`
}

// Summarize returns the median, extremes and spread of xs.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var m float64
	if n := len(s); n%2 == 1 {
		m = s[n/2]
	} else {
		m = (s[n/2-1] + s[n/2]) / 2
	}
	sum := Summary{Median: m, Min: s[0], Max: s[len(s)-1]}
	if m > 0 {
		sum.SpreadPct = (sum.Max - sum.Min) / m * 100
	}
	return sum
}

package xsk

import "fmt"

// KernelStats are the kernel's counters for a socket (XDP_STATISTICS).
type KernelStats struct {
	// RxDropped counts frames dropped before they reached the RX ring:
	// in copy mode mostly because the fill ring was empty (see
	// RxFillRingEmptyDescs), else because a frame was larger than a UMEM
	// frame. The kernel takes a fill ring entry before it looks at the RX
	// ring, and with the default sizes (FillSize == RxSize, at most
	// FillSize frames lent) the fill ring runs empty exactly when the RX
	// ring is full: a consumer that is too slow shows here, not in
	// RxRingFull. RxRingFull moves only when more frames are lent than
	// the RX ring holds (RxSize < FillSize).
	RxDropped            uint64
	RxInvalidDescs       uint64 // fill ring entries the kernel rejected
	TxInvalidDescs       uint64 // TX descriptors the kernel rejected
	RxRingFull           uint64 // frames dropped because the RX ring was full: the consumer was too slow (see RxDropped)
	RxFillRingEmptyDescs uint64 // times the kernel found the fill ring empty
	TxRingEmptyDescs     uint64 // times the kernel found the TX ring empty when woken
	// Fields is how many counters the kernel filled in: 6, or 3 on
	// kernels before 5.9 (then the last three read 0).
	Fields int
}

// Stats are a socket's counters: the kernel's, and the socket's own. All
// are totals since Open.
type Stats struct {
	Kernel KernelStats

	RxFrames  uint64 // frames received (returned by Receive)
	RxBytes   uint64
	RxBatches uint64 // non-empty Receive calls
	TxFrames  uint64 // frames queued by Transmit
	TxBytes   uint64
	Completed uint64 // transmitted frames the kernel handed back
	TxDropped uint64 // frames Run released because the TX ring stayed full

	FillSubmitted uint64 // frames put on the fill ring
	Released      uint64 // frames given back with Release
	Allocated     uint64 // frames taken with Alloc

	TxKicks   uint64 // sendto() calls that started transmission
	TxBusy    uint64 // of those, how many stopped before the TX ring was empty
	RxWakeups uint64 // recvfrom() calls: need_wakeup on the fill ring, or busy polling
	Polls     uint64 // poll() calls
	// BlockingPolls counts poll mode's waits on an empty ring that found
	// nothing within its raw wait and went on in the runtime's blocking
	// poll() (an idle socket, or gaps in the traffic of milliseconds).
	BlockingPolls uint64
}

// Stats returns the socket's counters. It may be called from any
// goroutine, also while Run is in progress.
func (s *Socket) Stats() (Stats, error) {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Load() {
		return Stats{}, ErrClosed
	}
	st, fields, err := getStatistics(s.fd)
	if err != nil {
		return Stats{}, fmt.Errorf("xsk: read XDP_STATISTICS: %w", err)
	}
	c := &s.c
	return Stats{
		Kernel: KernelStats{
			RxDropped:            st.Rx_dropped,
			RxInvalidDescs:       st.Rx_invalid_descs,
			TxInvalidDescs:       st.Tx_invalid_descs,
			RxRingFull:           st.Rx_ring_full,
			RxFillRingEmptyDescs: st.Rx_fill_ring_empty_descs,
			TxRingEmptyDescs:     st.Tx_ring_empty_descs,
			Fields:               fields,
		},
		RxFrames:      c.rxFrames.Load(),
		RxBytes:       c.rxBytes.Load(),
		RxBatches:     c.rxBatches.Load(),
		TxFrames:      c.txFrames.Load(),
		TxBytes:       c.txBytes.Load(),
		Completed:     c.completed.Load(),
		TxDropped:     c.txDropped.Load(),
		FillSubmitted: c.fillSubmitted.Load(),
		Released:      c.released.Load(),
		Allocated:     c.allocated.Load(),
		TxKicks:       c.txKicks.Load(),
		TxBusy:        c.txBusy.Load(),
		RxWakeups:     c.rxWakeups.Load(),
		Polls:         c.polls.Load(),
		BlockingPolls: c.blockingPolls.Load(),
	}, nil
}

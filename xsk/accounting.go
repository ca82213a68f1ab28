package xsk

import (
	"errors"
	"fmt"
	"runtime"
)

// Accounting says where the frames a socket owns are. Every frame is in
// exactly one of Free, Fill, Held and TX; FillRing, RxRing, TxRing and
// CompletionRing break Fill and TX down by ring (the remainder is inside
// the kernel, between rings).
type Accounting struct {
	Owned int // frames the socket owns
	Free  int // on the socket's free list
	Fill  int // lent to the kernel for receiving
	Held  int // held by the application (received or allocated)
	TX    int // lent to the kernel for sending

	FillRing       int // of Fill: on the fill ring, not yet taken by the kernel
	RxRing         int // of Fill: received, waiting on the RX ring
	TxRing         int // of TX: on the TX ring, not yet taken by the kernel
	CompletionRing int // of TX: sent, waiting on the completion ring
}

// Sum returns Free+Fill+Held+TX, which equals Owned when the books balance.
func (a Accounting) Sum() int { return a.Free + a.Fill + a.Held + a.TX }

// Accounting counts where the socket's frames are. Call it from the
// goroutine that drives the socket (a Run handler may), or while the socket
// is idle.
func (s *Socket) Accounting() Accounting {
	var byPlace [numPlaces]int
	for _, p := range s.state {
		byPlace[p]++
	}
	a := Accounting{
		Owned: s.owned,
		Free:  byPlace[placeFree],
		Fill:  byPlace[placeFill],
		Held:  byPlace[placeHeld],
		TX:    byPlace[placeTX],
	}
	if s.fill != nil && s.fill.mem != nil {
		a.FillRing = int(s.fill.prod - s.fill.kernelConsumer())
		a.RxRing = int(s.rx.kernelProducer() - s.rx.cons)
		if s.tx != nil {
			a.TxRing = int(s.tx.prod - s.tx.kernelConsumer())
		}
		a.CompletionRing = int(s.comp.kernelProducer() - s.comp.cons)
	}
	return a
}

// CheckFrames verifies the socket's books: every frame it owns is in
// exactly one place, the per-frame record agrees with the free list, with
// the counts of frames lent to the kernel and with what each ring holds.
// It returns nil or an error listing what is wrong. Call it as Accounting.
func (s *Socket) CheckFrames() error {
	if s.closed.Load() {
		if s.owned != 0 || len(s.free) != 0 {
			return fmt.Errorf("xsk: closed socket still owns %d frames (%d free)", s.owned, len(s.free))
		}
		return nil
	}
	var errs []error
	a := s.Accounting()
	if a.Sum() != a.Owned {
		errs = append(errs, fmt.Errorf("frames by place %+v add up to %d, socket owns %d", a, a.Sum(), a.Owned))
	}
	if a.Free != len(s.free) {
		errs = append(errs, fmt.Errorf("%d frames recorded free, free list has %d", a.Free, len(s.free)))
	}
	seen := make(map[uint64]bool, len(s.free))
	for _, b := range s.free {
		fi := b >> s.shift
		switch {
		case seen[b]:
			errs = append(errs, fmt.Errorf("frame %d twice on the free list", fi))
		case s.state[fi] != placeFree:
			errs = append(errs, fmt.Errorf("frame %d on the free list is recorded %s", fi, placeNames[s.state[fi]]))
		}
		seen[b] = true
	}
	if lent := s.lent(); uint64(a.Fill) != lent {
		errs = append(errs, fmt.Errorf("%d frames recorded lent for receiving, counters say %d", a.Fill, lent))
	}
	if uint64(a.TX) != s.txInFlight {
		errs = append(errs, fmt.Errorf("%d frames recorded lent for sending, %d in flight", a.TX, s.txInFlight))
	}
	// The kernel publishes one ring's index a moment before the other's
	// (RX before fill, completion before TX), so a frame can show on both
	// rings for an instant under load: only a lasting excess is an error.
	for try := 0; ; try++ {
		if a.FillRing+a.RxRing <= a.Fill && a.TxRing+a.CompletionRing <= a.TX {
			break
		}
		if try == 100 {
			errs = append(errs, fmt.Errorf("fill ring (%d) and RX ring (%d) hold more than the %d frames lent, "+
				"or TX ring (%d) and completion ring (%d) more than the %d in flight",
				a.FillRing, a.RxRing, a.Fill, a.TxRing, a.CompletionRing, a.TX))
			break
		}
		runtime.Gosched()
		a = s.Accounting()
	}
	check := func(ring string, addr uint64, want uint8) {
		fi := s.umem.frameIndex(addr)
		if fi >= uint64(len(s.state)) {
			errs = append(errs, fmt.Errorf("%s ring holds address %#x outside the UMEM", ring, addr))
		} else if s.state[fi] != want {
			errs = append(errs, fmt.Errorf("%s ring holds frame %d recorded %s", ring, fi, placeNames[s.state[fi]]))
		}
	}
	for i := s.fill.prod - uint32(a.FillRing); i != s.fill.prod; i++ {
		check("fill", *s.fill.at(i), placeFill)
	}
	for i := s.rx.cons; i != s.rx.cons+uint32(a.RxRing); i++ {
		check("RX", s.rx.at(i).Addr, placeFill)
	}
	if s.tx != nil {
		for i := s.tx.prod - uint32(a.TxRing); i != s.tx.prod; i++ {
			check("TX", s.tx.at(i).Addr, placeTX)
		}
	}
	for i := s.comp.cons; i != s.comp.cons+uint32(a.CompletionRing); i++ {
		check("completion", *s.comp.at(i), placeTX)
	}
	if len(errs) > 0 {
		return fmt.Errorf("xsk: frame accounting of ifindex %d queue %d: %w", s.ifindex, s.queue, errors.Join(errs...))
	}
	return nil
}

// CheckFrames verifies the books of the whole UMEM: every frame is either
// in the pool or owned by exactly one open socket, and each socket's own
// books balance (Socket.CheckFrames). Call it while no socket on the UMEM
// is being driven, or from the one goroutine that drives them all.
func (u *UMEM) CheckFrames() error {
	u.mu.Lock()
	socks := append([]*Socket(nil), u.sockets...)
	inPool := append([]bool(nil), u.inPool...)
	pool := len(u.pool)
	u.mu.Unlock()

	var errs []error
	pooled := 0
	for i := range u.count {
		owners := 0
		if inPool[i] {
			owners++
			pooled++
		}
		for _, s := range socks {
			if s.state[i] != placeNone {
				owners++
			}
		}
		if owners != 1 {
			errs = append(errs, fmt.Errorf("frame %d has %d owners (pool and sockets), want 1", i, owners))
		}
	}
	if pooled != pool {
		errs = append(errs, fmt.Errorf("%d frames marked pooled, pool holds %d", pooled, pool))
	}
	for _, s := range socks {
		if err := s.CheckFrames(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("xsk: UMEM frame accounting: %w", errors.Join(errs...))
	}
	return nil
}

// Pooled returns how many frames no socket owns.
func (u *UMEM) Pooled() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.pool)
}

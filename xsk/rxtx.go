package xsk

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// Frame is one packet in the UMEM. Data is a view into the shared memory,
// not a copy: it is valid from the Receive or Alloc that returned the frame
// until the frame is passed to Release or Transmit (or its socket is
// closed), and must not be used after that. Its capacity reaches the end of
// the frame, so a packet may grow in place (Data = Data[:n]); it may also
// be shortened from the front (Data = Data[k:]) before Transmit.
//
// A Frame is a small value (32 bytes) that may be copied; only one copy
// may be released or transmitted.
type Frame struct {
	Data []byte
	// addr is the frame's base address in the UMEM, with the id of the
	// socket that handed it out in the top 16 bits.
	addr uint64
}

// Addr returns the UMEM offset of the start of the frame (not of Data).
func (f Frame) Addr() uint64 { return f.addr & addrMask }

// Receive takes up to len(frames) received frames from the RX ring without
// waiting and returns how many it stored in frames. The frames are held by
// the caller until released (Release) or sent (Transmit). It never blocks
// and makes no system call; see Wait and Run for waiting.
func (s *Socket) Receive(frames []Frame) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if len(s.free) > 0 && s.lent() < s.fillLimit {
		s.refill()
	}
	want := uint32(min(len(frames), math.MaxUint32))
	n := s.rx.avail(want)
	if n == 0 {
		return 0, nil
	}
	frames = frames[:n]
	idx := s.rx.cons
	id := uint64(s.id) << unalignedOffsetShift
	var bytes uint64
	for i := range frames {
		d := s.rx.at(idx + uint32(i))
		addr, l := d.Addr, uint64(d.Len)
		base := addr & addrMask
		data := base
		if s.unaligned {
			data += addr >> unalignedOffsetShift
		} else {
			base &^= s.frameSize - 1
		}
		fi := base >> s.shift
		if s.debug && (fi >= uint64(len(s.state)) || s.state[fi] != placeFill) {
			panic(fmt.Sprintf("xsk: RX descriptor %#x: %v", addr, s.placeError(base, placeFill)))
		}
		s.state[fi] = placeHeld
		frames[i] = Frame{Data: s.mem[data : data+l : base+s.frameSize], addr: base | id}
		bytes += l
	}
	s.rx.release(n)
	s.c.rxFrames.Add(uint64(n))
	s.c.rxBytes.Add(bytes)
	s.c.rxBatches.Add(1)
	return int(n), nil
}

// lent is the number of frames lent to the kernel for receiving (fill
// ring, driver, RX ring).
func (s *Socket) lent() uint64 {
	return s.c.fillSubmitted.Load() - s.c.rxFrames.Load()
}

// refill moves frames from the free list to the fill ring, keeping at most
// fillLimit frames lent to the kernel for receiving.
func (s *Socket) refill() {
	lent := s.lent()
	if lent >= s.fillLimit || len(s.free) == 0 {
		return
	}
	want := uint32(min(uint64(len(s.free)), s.fillLimit-lent))
	n := s.fill.free(want)
	if n == 0 {
		return
	}
	prod := s.fill.prod
	top := len(s.free)
	for i := uint32(0); i < n; i++ {
		a := s.free[top-1-int(i)]
		*s.fill.at(prod + i) = a
		s.state[a>>s.shift] = placeFill
	}
	s.free = s.free[:top-int(n)]
	s.fill.submit(n)
	s.c.fillSubmitted.Add(uint64(n))
}

// Release gives frames back: to the fill ring for receiving while fewer
// than FillSize frames are lent to the kernel, else to the free list for
// Alloc. Each frame must be held (returned by Receive or Alloc, not yet
// released or sent); on the first that is not, Release stops and returns
// an error wrapping ErrInvalidFrame, having released the frames before it.
func (s *Socket) Release(frames []Frame) error {
	if s.closed.Load() {
		return ErrClosed
	}
	_, err := s.release(frames)
	return err
}

// release is Release, also returning how many frames it gave back: on an
// error, frames[done] is the one refused.
func (s *Socket) release(frames []Frame) (done int, err error) {
	lent := s.lent()
	room := uint32(0)
	if lent < s.fillLimit {
		room = s.fill.free(uint32(min(uint64(len(frames)), s.fillLimit-lent)))
	}
	prod := s.fill.prod
	var k uint32
	for i := range frames {
		// The common case through holds (inlined: a frame this socket
		// handed out, held); hold handles the rest and the errors.
		f := &frames[i]
		fi := (f.addr & addrMask) >> s.shift
		if !s.holds(*f) {
			var e error
			if fi, e = s.hold(f); e != nil {
				err = e
				break
			}
		}
		done++
		base := fi << s.shift
		if k < room {
			*s.fill.at(prod + k) = base
			s.state[fi] = placeFill
			k++
		} else {
			s.free = append(s.free, base)
			s.state[fi] = placeFree
		}
		frames[i].Data = nil
	}
	if k > 0 {
		s.fill.submit(k)
		s.c.fillSubmitted.Add(uint64(k))
	}
	s.c.released.Add(uint64(done))
	return done, err
}

// hold checks that f is held by the application and returns its frame
// index. A frame handed out by another socket on the same UMEM is adopted
// (see the concurrency rules on Socket).
func (s *Socket) hold(f *Frame) (uint64, error) {
	fi := (f.addr & addrMask) >> s.shift
	if uint16(f.addr>>unalignedOffsetShift) != s.id {
		return s.adopt(f)
	}
	if fi >= uint64(len(s.state)) || s.state[fi] != placeHeld {
		return 0, s.placeError(f.addr&addrMask, placeHeld)
	}
	return fi, nil
}

// adopt takes over a held frame from the socket that handed it out.
func (s *Socket) adopt(f *Frame) (uint64, error) {
	fi := (f.addr & addrMask) >> s.shift
	u := s.umem
	u.mu.Lock()
	o := u.byID[uint16(f.addr>>unalignedOffsetShift)]
	u.mu.Unlock()
	if o == nil || fi >= uint64(len(o.state)) || o.state[fi] != placeHeld {
		return 0, s.placeError(f.addr&addrMask, placeHeld)
	}
	o.state[fi] = placeNone
	o.owned--
	s.state[fi] = placeHeld
	s.owned++
	f.addr = f.addr&addrMask | uint64(s.id)<<unalignedOffsetShift
	return fi, nil
}

func (s *Socket) placeError(addr uint64, want uint8) error {
	return s.umem.placeError(addr, want)
}

// Alloc takes up to len(frames) frames from the free list for the
// application to fill and Transmit, and returns how many it stored. Each
// frame's Data spans the frame after the UMEM headroom; shorten it to the
// packet's length. Alloc returns fewer frames when the free list runs low:
// Complete refills it.
func (s *Socket) Alloc(frames []Frame) int {
	if s.closed.Load() {
		return 0
	}
	n := min(len(frames), len(s.free))
	top := len(s.free)
	id := uint64(s.id) << unalignedOffsetShift
	for i := range frames[:n] {
		base := s.free[top-1-i]
		s.state[base>>s.shift] = placeHeld
		frames[i] = Frame{Data: s.mem[base+s.headroom : base+s.frameSize : base+s.frameSize], addr: base | id}
	}
	s.free = s.free[:top-n]
	s.c.allocated.Add(uint64(n))
	return n
}

// Transmit queues frames on the TX ring, in order, and wakes the kernel if
// it needs it. It returns how many frames it queued: fewer than len(frames)
// when the TX ring is full, in which case the rest stay held by the caller
// (call Complete and try again, or Release them). Each frame sends
// len(Data) bytes from where Data starts, which must lie in the frame's own
// UMEM frame. On a frame that is not held it stops with an error wrapping
// ErrInvalidFrame, having queued the frames before it. A receive-only
// socket (Options.RxOnly) refuses every frame with ErrInvalidOptions.
func (s *Socket) Transmit(frames []Frame) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if s.tx == nil {
		return 0, s.errRxOnly("transmit")
	}
	n := s.tx.free(uint32(min(len(frames), math.MaxUint32)))
	prod := s.tx.prod
	var bytes uint64
	var err error
	var k uint32
	for ; k < n; k++ {
		f := &frames[k]
		fi, e := s.hold(f)
		if e != nil {
			err = e
			break
		}
		base := fi << s.shift
		off, ok := dataOffset(s.mem, f.Data)
		l := uint64(len(f.Data))
		if !ok || off < base || off+l > base+s.frameSize {
			err = fmt.Errorf("%w: frame %d: its data (%d bytes at UMEM offset %#x) is not inside the frame [%#x, %#x)",
				ErrInvalidFrame, fi, l, off, base, base+s.frameSize)
			break
		}
		d := s.tx.at(prod + k)
		d.Addr, d.Len, d.Options = off, uint32(l), 0
		s.state[fi] = placeTX
		f.Data = nil
		bytes += l
	}
	if k > 0 {
		s.tx.submit(k)
		s.txInFlight += uint64(k)
		s.c.txFrames.Add(uint64(k))
		s.c.txBytes.Add(bytes)
		if e := s.kick(); e != nil && err == nil {
			err = e
		}
	}
	return int(k), err
}

// kick makes the sendto() that starts transmission, when the kernel needs
// one: always in copy mode, and in zero-copy mode when the TX ring carries
// XDP_RING_NEED_WAKEUP or need_wakeup is off.
func (s *Socket) kick() error {
	if s.needWake && !s.busyPoll && !s.tx.needWakeup() {
		return nil
	}
	s.c.txKicks.Add(1)
	switch errno := wakeTX(s.fd); errno {
	case 0:
		return nil
	case unix.EAGAIN, unix.EBUSY, unix.ENOBUFS:
		// The kernel stopped early (its per-call budget, a full
		// completion ring, a busy driver): frames remain on the TX ring
		// and Complete kicks again.
		s.c.txBusy.Add(1)
		return nil
	case unix.ENETDOWN:
		return fmt.Errorf("xsk: transmit on ifindex %d queue %d: %w (is the interface up?)", s.ifindex, s.queue, errno)
	default:
		return fmt.Errorf("xsk: transmit on ifindex %d queue %d: %w", s.ifindex, s.queue, errno)
	}
}

// Complete moves the frames the kernel has finished sending from the
// completion ring to the free list, kicks the kernel again if frames are
// still waiting on the TX ring, and returns how many frames completed.
func (s *Socket) Complete() (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if s.txInFlight == 0 {
		return 0, nil
	}
	n := s.comp.avail(s.comp.size)
	idx := s.comp.cons
	for i := uint32(0); i < n; i++ {
		addr := *s.comp.at(idx + i)
		fi := (addr & addrMask) >> s.shift
		if s.debug && (fi >= uint64(len(s.state)) || s.state[fi] != placeTX) {
			panic(fmt.Sprintf("xsk: completion %#x: %v", addr, s.placeError(addr&addrMask, placeTX)))
		}
		s.state[fi] = placeFree
		s.free = append(s.free, fi<<s.shift)
	}
	if n > 0 {
		s.comp.release(n)
		s.txInFlight -= uint64(n)
		s.c.completed.Add(uint64(n))
	}
	var err error
	if s.tx.kernelConsumer() != s.tx.prod {
		err = s.kick()
	}
	return int(n), err
}

// errRxOnly is the error of a send on a receive-only socket.
func (s *Socket) errRxOnly(what string) error {
	return fmt.Errorf("xsk: %s on ifindex %d queue %d: %w: the socket was opened receive-only, without a TX ring "+
		"(open it without Options.RxOnly to send)", what, s.ifindex, s.queue, ErrInvalidOptions)
}

// wakeRX makes the recvfrom() the kernel asked for (need_wakeup on the
// fill ring), or that drives a round of busy polling.
func (s *Socket) wakeRX() error {
	if !s.busyPoll && !(s.needWake && s.fill.needWakeup()) {
		return nil
	}
	s.c.rxWakeups.Add(1)
	switch errno := wakeRX(s.fd); errno {
	case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS:
		return nil
	case unix.ENETDOWN:
		return fmt.Errorf("xsk: receive on ifindex %d queue %d: %w (is the interface up?)", s.ifindex, s.queue, errno)
	default:
		return fmt.Errorf("xsk: receive on ifindex %d queue %d: %w", s.ifindex, s.queue, errno)
	}
}

// recycle is Receive and Release of every frame in one step, for a loop
// that drops what it receives without looking at it (RxDrop): up to want
// received frames go from the RX ring straight back to the fill ring, as
// in xdpsock's rxdrop, without becoming Frames in between. It returns how
// many it took; the counters move as Receive and Release would move them.
// Frames that find no room on the fill ring stay on the RX ring for the
// next call (the fill ring always has room for what the kernel took from
// it, so that is only a stale cached index).
func (s *Socket) recycle(want uint32) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if len(s.free) > 0 && s.lent() < s.fillLimit {
		s.refill()
	}
	n := s.rx.avail(want)
	if n == 0 {
		return 0, nil
	}
	n = s.fill.free(n)
	if n == 0 {
		return 0, nil
	}
	idx, prod := s.rx.cons, s.fill.prod
	var bytes uint64
	for i := uint32(0); i < n; i++ {
		d := s.rx.at(idx + i)
		base := d.Addr & addrMask
		if !s.unaligned {
			base &^= s.frameSize - 1
		}
		if s.debug {
			if fi := base >> s.shift; fi >= uint64(len(s.state)) || s.state[fi] != placeFill {
				panic(fmt.Sprintf("xsk: RX descriptor %#x: %v", d.Addr, s.placeError(base, placeFill)))
			}
		}
		*s.fill.at(prod + i) = base
		bytes += uint64(d.Len)
	}
	// Each frame stays placeFill: it went from the fill ring to the RX
	// ring and back without the application holding it.
	s.rx.release(n)
	s.fill.submit(n)
	s.c.rxFrames.Add(uint64(n))
	s.c.rxBytes.Add(bytes)
	s.c.rxBatches.Add(1)
	s.c.fillSubmitted.Add(uint64(n))
	s.c.released.Add(uint64(n))
	return int(n), nil
}

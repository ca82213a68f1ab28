package xsk

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/caps"
)

// BindMode chooses how the socket gets frames from the driver.
type BindMode int

const (
	// BindAuto lets the kernel use zero-copy where the driver supports
	// it and copy mode elsewhere. Socket.ZeroCopy says which it chose.
	BindAuto BindMode = iota
	// BindCopy forces copy mode (XDP_COPY): works on every driver.
	BindCopy
	// BindZeroCopy requires zero-copy (XDP_ZEROCOPY); Open fails with
	// ErrZeroCopyUnsupported on a driver without it.
	BindZeroCopy
)

func (m BindMode) String() string {
	switch m {
	case BindAuto:
		return "auto"
	case BindCopy:
		return "copy"
	case BindZeroCopy:
		return "zero-copy"
	}
	return fmt.Sprintf("BindMode(%d)", int(m))
}

// WaitMode chooses what Run (and Wait) do when the RX ring is empty.
type WaitMode int

const (
	// WaitAdaptive checks the ring again for up to Options.SpinFor
	// (default 20µs), then sleeps in poll() until the kernel signals
	// frames. While frames keep arriving no system call is made; an idle
	// socket costs no CPU.
	WaitAdaptive WaitMode = iota
	// WaitBlock sleeps in poll() as soon as the ring is empty.
	WaitBlock
	// WaitPoll calls poll() before every batch, whether the ring is empty
	// or not (the "poll mode" of xdpsock -p and of asavie/xdp).
	WaitPoll
	// WaitSpin never sleeps: it checks the ring in a loop, making the
	// wakeup system call only when the kernel asks (need_wakeup) or busy
	// polling is on. One CPU stays at 100%.
	WaitSpin
)

func (m WaitMode) String() string {
	switch m {
	case WaitAdaptive:
		return "adaptive"
	case WaitBlock:
		return "block"
	case WaitPoll:
		return "poll"
	case WaitSpin:
		return "spin"
	}
	return fmt.Sprintf("WaitMode(%d)", int(m))
}

// ParseWaitMode reads a wait mode by its String name: adaptive, block,
// poll or spin.
func ParseWaitMode(s string) (WaitMode, error) {
	for _, m := range []WaitMode{WaitAdaptive, WaitBlock, WaitPoll, WaitSpin} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("xsk: wait mode %q: %w (want adaptive, block, poll or spin)", s, ErrInvalidOptions)
}

// BusyPoll configures preferred busy polling (Linux 5.11+): the socket's
// system calls run the driver's NAPI loop in the calling thread instead of
// in softirq. It pays off only with the device's napi_defer_hard_irqs and
// gro_flush_timeout set (see SetNAPIDefer).
type BusyPoll struct {
	Enable bool
	// Timeout is SO_BUSY_POLL: how long one system call may busy-poll.
	// Default 20µs.
	Timeout time.Duration
	// Budget is SO_BUSY_POLL_BUDGET: frames per NAPI poll. Default 64
	// (DPDK's busy_budget default).
	Budget int
}

// Options shape a socket. Only Interface (or Ifindex) is required.
type Options struct {
	// Interface or Ifindex names the device. Ifindex wins when both are set.
	Interface string
	Ifindex   int
	// Queue is the device rx/tx queue to bind to.
	Queue int

	// UMEM to share with other sockets. Nil: the socket gets a private
	// UMEM made from UMEMOptions, closed with the socket.
	UMEM        *UMEM
	UMEMOptions UMEMOptions

	// Bind: copy, zero-copy or auto (default). Sockets sharing a UMEM
	// inherit the mode and need_wakeup setting of the UMEM's first socket.
	Bind BindMode
	// DisableNeedWakeup turns off XDP_USE_NEED_WAKEUP. With it on
	// (default) the kernel says when it needs a system call to make
	// progress, and none is made otherwise.
	DisableNeedWakeup bool

	// Ring sizes (powers of two, default 2048 each).
	FillSize, CompletionSize, RxSize, TxSize int

	// RxOnly opens the socket without a TX ring (TxSize is then unused):
	// it can receive and release frames but not send them, so Transmit,
	// TxOnly and a Transmit verdict are refused. In copy mode with
	// need_wakeup, every poll() on a socket that has a TX ring also runs
	// the kernel's transmit path for it, even when the ring is empty; a
	// receive-only socket (as xdpsock's rxdrop opens) skips that work.
	// The completion ring stays: the kernel requires one per UMEM.
	RxOnly bool

	// Frames is how many UMEM frames this socket owns (default
	// FillSize+TxSize, FillSize if RxOnly, or what the UMEM has left if
	// that is less). At most
	// FillSize of them are lent to the kernel for receiving; the rest are
	// for Alloc and in-flight transmits.
	Frames int

	// Batch is the most frames Run hands to its handler at once, 1..512
	// (default 64).
	Batch int

	// Wait chooses how Run waits for frames (default WaitAdaptive).
	Wait WaitMode
	// SpinFor is how long WaitAdaptive re-checks an empty ring before
	// sleeping (default 20µs).
	SpinFor time.Duration

	// BusyPoll turns on preferred busy polling.
	BusyPoll BusyPoll
}

// Socket is an AF_XDP socket bound to one queue of one device, with its
// four rings and a share of a UMEM's frames.
//
// Concurrency: a Socket is driven by one goroutine at a time. Receive,
// Release, Alloc, Transmit, Complete, Wait, Run, Accounting and CheckFrames
// must not overlap. Stats, Fd, Queue, ZeroCopy and NeedWakeup may be called
// from any goroutine at any time. Close may be called from any goroutine
// but a Run handler's: it stops a Run in progress and waits for it to
// return; it must not overlap the other calls made directly. Several sockets may be driven by
// several goroutines, also when they share a UMEM; a frame may move
// between sockets (received on one, released or transmitted on another)
// only when both are driven by the same goroutine.
type Socket struct {
	fd        int
	umem      *UMEM
	ownUMEM   bool
	id        uint16
	ifindex   int
	queue     int
	zeroCopy  bool
	needWake  bool
	busyPoll  bool
	wait      WaitMode
	spinFor   time.Duration
	batch     int
	fillLimit uint64 // most frames lent to the kernel for receiving

	fill, comp *ring[uint64]
	rx, tx     *ring[unix.XDPDesc] // tx is nil on a receive-only socket

	// Mirrors of UMEM fields used per frame.
	mem       []byte
	shift     uint
	frameSize uint64
	rxOffset  uint64 // unaligned mode: add the descriptor's offset bits
	unaligned bool
	debug     bool
	headroom  uint64

	free  []uint64 // frame base addresses on our free list (a stack)
	state []uint8  // place of every UMEM frame we own, by frame index
	owned int      // frames we own

	txInFlight uint64 // frames on the TX ring, in the driver or on the completion ring

	// Monotonic counts of frame moves, written by the driving goroutine
	// (atomically, so Stats may read them from anywhere).
	c counters

	// Run's scratch space, allocated once.
	rxBuf    []Frame
	verdicts []Verdict
	relBuf   []Frame
	txBuf    []Frame
	pollFds  [2]unix.PollFd
	// pollNowFd is the socket alone, for poll mode's poll() before a
	// batch (see pollBatch).
	pollNowFd unix.PollFd
	// rawLeft is what is left of poll mode's raw wait on an empty ring,
	// which ppoll() itself counts down (see pollBatch); rawWaiting says
	// whether such a wait is in progress.
	rawLeft    unix.Timespec
	rawWaiting bool

	evfd    int // eventfd that interrupts a poll() in Run or Wait (Close, context)
	evbuf   [8]byte
	runMu   sync.Mutex  // held by Run
	closing atomic.Bool // Close has begun: Run must return
	closeMu sync.Mutex  // serialises Close with Stats and with context wakeups
	closed  atomic.Bool
}

// counters are the socket's own statistics (see Stats).
type counters struct {
	rxFrames, rxBytes, rxBatches       atomic.Uint64
	txDropped                          atomic.Uint64
	fillSubmitted                      atomic.Uint64
	released, allocated                atomic.Uint64
	txFrames, txBytes, txKicks, txBusy atomic.Uint64
	completed                          atomic.Uint64
	rxWakeups, polls, blockingPolls    atomic.Uint64
}

// Open creates an AF_XDP socket, registers or shares its UMEM, maps its
// rings, binds it to the device queue, and lends its fill ring frames.
// Traffic reaches it once an XDP program redirects into an XSKMAP entry
// holding it (see Redirect).
func Open(opts Options) (s *Socket, err error) {
	if err := opts.fillDefaults(); err != nil {
		return nil, err
	}
	u := opts.UMEM
	own := false
	if u == nil {
		if u, err = NewUMEM(opts.UMEMOptions); err != nil {
			return nil, err
		}
		own = true
	}
	s = &Socket{
		fd: -1, evfd: -1, umem: u, ownUMEM: own,
		ifindex: opts.Ifindex, queue: opts.Queue,
		busyPoll: opts.BusyPoll.Enable, wait: opts.Wait, spinFor: opts.SpinFor, batch: opts.Batch,
		fillLimit: uint64(opts.FillSize),
		mem:       u.mem, shift: u.frameShift, frameSize: u.frameSize, unaligned: u.unaligned,
		debug: u.debug, headroom: uint64(u.headroom),
		state: make([]uint8, u.count),
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.teardown())
			s = nil
		}
	}()

	u.mu.Lock()
	locked := true
	defer func() {
		if locked {
			u.mu.Unlock()
		}
	}()
	if u.closed {
		return s, fmt.Errorf("xsk: open on %s queue %d: UMEM %w", opts.name(), opts.Queue, ErrClosed)
	}
	var shareWith *Socket
	if u.shared {
		for _, o := range u.sockets {
			if o.ifindex == opts.Ifindex && o.queue == opts.Queue {
				return s, fmt.Errorf("xsk: open on %s queue %d: a socket on this queue already uses this UMEM: %w "+
					"(both would share one fill ring; use one socket per queue)", opts.name(), opts.Queue, ErrInvalidOptions)
			}
		}
		shareWith = u.sockets[0]
		if opts.Bind == BindZeroCopy && !u.zeroCopy || opts.Bind == BindCopy && u.zeroCopy {
			return s, fmt.Errorf("xsk: open on %s queue %d in %s mode: the UMEM's first socket runs in %s mode "+
				"and sockets sharing a UMEM inherit it: %w", opts.name(), opts.Queue, opts.Bind, modeName(u.zeroCopy), ErrInvalidOptions)
		}
	}
	if err := u.addSocket(s); err != nil {
		return s, err
	}

	if s.fd, err = unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
		return s, fmt.Errorf("xsk: create AF_XDP socket: %w%s", err, caps.Suffix(err, caps.Of(caps.NetRaw)))
	}
	if shareWith == nil {
		if err := registerUMEM(s.fd, u.mem, uint32(u.frameSize), u.headroom, u.regFlags()); err != nil {
			return s, fmt.Errorf("xsk: register UMEM (%d frames of %d bytes): %w%s", u.count, u.frameSize, err, memlockHint(err, uint64(u.count)*u.frameSize))
		}
	}
	sizes := []struct {
		opt  int
		n    int
		name string
	}{
		{unix.XDP_UMEM_FILL_RING, opts.FillSize, "fill"},
		{unix.XDP_UMEM_COMPLETION_RING, opts.CompletionSize, "completion"},
		{unix.XDP_RX_RING, opts.RxSize, "RX"},
		{unix.XDP_TX_RING, opts.TxSize, "TX"},
	}
	if opts.RxOnly {
		sizes = sizes[:3]
	}
	for _, r := range sizes {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_XDP, r.opt, r.n); err != nil {
			return s, fmt.Errorf("xsk: set %s ring size %d: %w", r.name, r.n, err)
		}
	}
	if !opts.RxOnly {
		// Let one sendto() push the whole TX ring in copy mode (Linux
		// 6.17+); older kernels stop after 32 frames per call, which
		// Complete copes with.
		_ = unix.SetsockoptInt(s.fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, opts.TxSize)
	}

	if err := s.mapRings(opts); err != nil {
		return s, err
	}
	if err := s.setBusyPoll(opts.BusyPoll); err != nil {
		return s, err
	}

	sa := &unix.SockaddrXDP{Ifindex: uint32(opts.Ifindex), QueueID: uint32(opts.Queue)}
	if shareWith != nil {
		sa.Flags = unix.XDP_SHARED_UMEM
		sa.SharedUmemFD = uint32(shareWith.fd)
	} else {
		switch opts.Bind {
		case BindCopy:
			sa.Flags |= unix.XDP_COPY
		case BindZeroCopy:
			sa.Flags |= unix.XDP_ZEROCOPY
		}
		if !opts.DisableNeedWakeup {
			sa.Flags |= unix.XDP_USE_NEED_WAKEUP
		}
	}
	if err := bindRetry(s.fd, sa); err != nil {
		switch {
		case opts.Bind == BindZeroCopy && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)):
			return s, fmt.Errorf("xsk: bind to %s queue %d in zero-copy mode: %w (bind in copy mode, or let the kernel choose the mode): %w",
				opts.name(), opts.Queue, ErrZeroCopyUnsupported, err)
		case errors.Is(err, unix.EBUSY):
			return s, fmt.Errorf("xsk: bind to %s queue %d: %w (another AF_XDP socket is bound to this queue)", opts.name(), opts.Queue, err)
		case errors.Is(err, unix.EINVAL) && opts.Queue > 0:
			return s, fmt.Errorf("xsk: bind to %s queue %d: %w (does the device have that many queues? see ethtool -l)", opts.name(), opts.Queue, err)
		}
		return s, fmt.Errorf("xsk: bind to %s queue %d (%s mode): %w", opts.name(), opts.Queue, opts.Bind, err)
	}
	xo, err := unix.GetsockoptInt(s.fd, unix.SOL_XDP, unix.XDP_OPTIONS)
	if err != nil {
		return s, fmt.Errorf("xsk: read XDP_OPTIONS: %w", err)
	}
	s.zeroCopy = xo&unix.XDP_OPTIONS_ZEROCOPY != 0
	if shareWith == nil {
		u.shared = true
		u.zeroCopy = s.zeroCopy
		u.needWakeup = !opts.DisableNeedWakeup
	}
	s.needWake = u.needWakeup
	if s.unaligned {
		s.rxOffset = 1
	}

	frames, err := u.take(opts.Frames)
	if err != nil {
		return s, err
	}
	s.free = frames
	s.owned = len(frames)
	for _, a := range frames {
		s.state[a>>s.shift] = placeFree
	}
	u.mu.Unlock()
	locked = false

	if s.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return s, fmt.Errorf("xsk: create eventfd: %w", err)
	}
	s.pollFds = [2]unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}, {Fd: int32(s.evfd), Events: unix.POLLIN}}
	s.pollNowFd = unix.PollFd{Fd: int32(s.fd), Events: unix.POLLIN}
	s.rxBuf = make([]Frame, s.batch)
	s.verdicts = make([]Verdict, s.batch)
	s.relBuf = make([]Frame, 0, s.batch)
	s.txBuf = make([]Frame, 0, s.batch)
	s.refill()
	return s, nil
}

func modeName(zc bool) string {
	if zc {
		return "zero-copy"
	}
	return "copy"
}

func (o *Options) name() string {
	if o.Interface != "" {
		return o.Interface
	}
	return fmt.Sprintf("ifindex %d", o.Ifindex)
}

func (o *Options) fillDefaults() error {
	if o.Ifindex == 0 {
		if o.Interface == "" {
			return fmt.Errorf("xsk: %w: no interface given (by name or by index)", ErrInvalidOptions)
		}
		ifi, err := net.InterfaceByName(o.Interface)
		if err != nil {
			return fmt.Errorf("xsk: find interface %q: %w", o.Interface, err)
		}
		o.Ifindex = ifi.Index
	}
	if o.Queue < 0 {
		return fmt.Errorf("xsk: queue %d: %w", o.Queue, ErrInvalidOptions)
	}
	for _, r := range []*int{&o.FillSize, &o.CompletionSize, &o.RxSize, &o.TxSize} {
		if *r == 0 {
			*r = DefaultRingSize
		}
		if *r < 1 || *r > 1<<20 || *r&(*r-1) != 0 {
			return fmt.Errorf("xsk: ring size %d: %w (a power of two up to 1M)", *r, ErrInvalidOptions)
		}
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.Batch < 1 || o.Batch > MaxBatch {
		return fmt.Errorf("xsk: batch %d: %w (1 to %d)", o.Batch, ErrInvalidOptions, MaxBatch)
	}
	if o.Frames == 0 {
		o.Frames = o.FillSize + o.TxSize
		if o.RxOnly {
			o.Frames = o.FillSize
		}
		count := DefaultFrameCount
		if o.UMEM != nil {
			o.UMEM.mu.Lock()
			count = len(o.UMEM.pool)
			o.UMEM.mu.Unlock()
		} else if o.UMEMOptions.FrameCount != 0 {
			count = o.UMEMOptions.FrameCount
		}
		if count == 0 {
			return fmt.Errorf("xsk: the UMEM has no frames left for another socket: %w "+
				"(raise UMEMOptions.FrameCount or set Options.Frames lower on each socket)", ErrInvalidOptions)
		}
		o.Frames = min(o.Frames, count)
	}
	if o.Frames < 1 {
		return fmt.Errorf("xsk: %d frames: %w", o.Frames, ErrInvalidOptions)
	}
	if o.Wait < WaitAdaptive || o.Wait > WaitSpin {
		return fmt.Errorf("xsk: wait mode %d: %w", o.Wait, ErrInvalidOptions)
	}
	if o.SpinFor == 0 {
		o.SpinFor = 20 * time.Microsecond
	}
	if o.BusyPoll.Enable {
		if o.BusyPoll.Timeout == 0 {
			o.BusyPoll.Timeout = 20 * time.Microsecond
		}
		if o.BusyPoll.Budget == 0 {
			o.BusyPoll.Budget = 64
		}
		if o.BusyPoll.Timeout < 0 || o.BusyPoll.Budget < 1 || o.BusyPoll.Budget > 65535 {
			return fmt.Errorf("xsk: busy poll timeout %v budget %d: %w", o.BusyPoll.Timeout, o.BusyPoll.Budget, ErrInvalidOptions)
		}
	}
	return nil
}

func (u *UMEM) regFlags() uint32 {
	if u.unaligned {
		return unix.XDP_UMEM_UNALIGNED_CHUNK_FLAG
	}
	return 0
}

func (s *Socket) mapRings(opts Options) error {
	off, err := getMmapOffsets(s.fd)
	if err != nil {
		return fmt.Errorf("xsk: read ring offsets (XDP_MMAP_OFFSETS): %w", err)
	}
	if s.fill, err = mapRing[uint64](s.fd, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, uint32(opts.FillSize), true); err != nil {
		return fmt.Errorf("xsk: map fill ring: %w", err)
	}
	if s.comp, err = mapRing[uint64](s.fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, uint32(opts.CompletionSize), false); err != nil {
		return fmt.Errorf("xsk: map completion ring: %w", err)
	}
	if s.rx, err = mapRing[unix.XDPDesc](s.fd, unix.XDP_PGOFF_RX_RING, off.Rx, uint32(opts.RxSize), false); err != nil {
		return fmt.Errorf("xsk: map RX ring: %w", err)
	}
	if opts.RxOnly {
		return nil
	}
	if s.tx, err = mapRing[unix.XDPDesc](s.fd, unix.XDP_PGOFF_TX_RING, off.Tx, uint32(opts.TxSize), true); err != nil {
		return fmt.Errorf("xsk: map TX ring: %w", err)
	}
	return nil
}

// bindRetry binds, retrying EBUSY for up to half a second: the kernel
// releases a queue shortly after the previous socket on it is closed, not
// at once.
func bindRetry(fd int, sa *unix.SockaddrXDP) error {
	deadline := time.Now().Add(500 * time.Millisecond)
	for delay := time.Millisecond; ; delay *= 2 {
		err := unix.Bind(fd, sa)
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(delay)
	}
}

// Fd returns the socket's file descriptor, for an XSKMAP entry.
func (s *Socket) Fd() int { return s.fd }

// Queue returns the queue the socket is bound to.
func (s *Socket) Queue() int { return s.queue }

// Ifindex returns the index of the device the socket is bound to.
func (s *Socket) Ifindex() int { return s.ifindex }

// ZeroCopy reports whether the kernel bound the socket in zero-copy mode
// (XDP_OPTIONS), which BindAuto leaves to the driver.
func (s *Socket) ZeroCopy() bool { return s.zeroCopy }

// NeedWakeup reports whether the socket uses XDP_USE_NEED_WAKEUP.
func (s *Socket) NeedWakeup() bool { return s.needWake }

// Rings are the sizes of a socket's four rings, in entries (TX 0 on a
// receive-only socket), and the UMEM frames the socket owns (of which at
// most Fill are lent to the kernel for receiving at any time).
type Rings struct {
	Fill, Completion, RX, TX int
	Frames                   int
}

// Rings returns the sizes the socket's rings were created and mapped with,
// and its share of the UMEM's frames. Frames moves when frames move
// between sockets sharing a UMEM: like Accounting, call it from the
// goroutine that drives the socket (or before it runs).
func (s *Socket) Rings() Rings {
	r := Rings{Fill: int(s.fill.size), Completion: int(s.comp.size), RX: int(s.rx.size), Frames: s.owned}
	if s.tx != nil {
		r.TX = int(s.tx.size)
	}
	return r
}

// UMEM returns the socket's UMEM.
func (s *Socket) UMEM() *UMEM { return s.umem }

// Close stops a Run in progress, closes the socket and unmaps its rings.
// Every frame the socket owned returns to the UMEM, including frames the
// application still holds: they must not be used afterwards. A private
// UMEM is closed too. Close is idempotent.
func (s *Socket) Close() error {
	s.closeMu.Lock()
	if s.closed.Load() {
		s.closeMu.Unlock()
		return nil
	}
	s.closing.Store(true)
	s.wakePoll()
	// Not holding closeMu while Run finishes: its handler may call Stats.
	s.closeMu.Unlock()
	s.runMu.Lock() // wait for Run (or TxOnly) to return
	defer s.runMu.Unlock()
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Load() { // a concurrent Close finished first
		return nil
	}
	s.closed.Store(true)
	return s.teardown()
}

// teardown releases everything Open made, in reverse order; it is also
// Open's unwinding path, so every step tolerates a missing resource.
func (s *Socket) teardown() error {
	var errs []error
	for _, r := range []interface{ unmap() error }{s.fill, s.comp} {
		if err := r.unmap(); err != nil {
			errs = append(errs, fmt.Errorf("xsk: unmap ring: %w", err))
		}
	}
	for _, r := range []interface{ unmap() error }{s.rx, s.tx} {
		if err := r.unmap(); err != nil {
			errs = append(errs, fmt.Errorf("xsk: unmap ring: %w", err))
		}
	}
	if s.fd >= 0 {
		if err := unix.Close(s.fd); err != nil {
			errs = append(errs, fmt.Errorf("xsk: close socket: %w", err))
		}
		s.fd = -1
	}
	if s.evfd >= 0 {
		if err := unix.Close(s.evfd); err != nil {
			errs = append(errs, fmt.Errorf("xsk: close eventfd: %w", err))
		}
		s.evfd = -1
	}
	if s.umem != nil {
		// Everything we owned comes back, wherever it was: the rings that
		// held it are gone.
		var back []uint64
		for i, p := range s.state {
			if p != placeNone {
				back = append(back, uint64(i))
				s.state[i] = placeNone
			}
		}
		s.umem.giveBack(back)
		s.free = s.free[:0]
		s.owned = 0
		s.umem.removeSocket(s)
		if s.ownUMEM {
			errs = append(errs, s.umem.Close())
		}
	}
	return errors.Join(errs...)
}

// memlockHint explains the ENOBUFS of XDP_UMEM_REG: the kernel charges a
// UMEM to its user's RLIMIT_MEMLOCK (all their UMEMs together) unless the
// process holds CAP_IPC_LOCK.
func memlockHint(err error, size uint64) string {
	if !errors.Is(err, unix.ENOBUFS) {
		return ""
	}
	var lim unix.Rlimit
	limit := "unknown"
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil {
		limit = fmt.Sprintf("%d KiB", lim.Cur>>10)
		if lim.Cur == unix.RLIM_INFINITY {
			limit = "unlimited"
		}
	}
	have := "this process lacks CAP_IPC_LOCK"
	if eff, err := caps.Effective(); err == nil && eff.Has(caps.IPCLock) {
		have = "this process holds CAP_IPC_LOCK, so the kernel is short of memory"
	}
	return fmt.Sprintf(" (the UMEM's %d KiB are locked memory: without CAP_IPC_LOCK they count against RLIMIT_MEMLOCK, %s here, shared by all of this user's UMEMs; %s: "+
		"grant it, raise the limit (ulimit -l, LimitMEMLOCK= in a systemd unit), or use fewer or smaller frames)", size>>10, limit, have)
}

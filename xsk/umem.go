package xsk

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Frame sizes the kernel accepts for an aligned UMEM and that this package
// offers.
const (
	FrameSize2K = 2048
	FrameSize4K = 4096
)

// Defaults of UMEMOptions and Options.
const (
	DefaultFrameSize  = FrameSize4K
	DefaultFrameCount = 4096
	DefaultRingSize   = 2048
	DefaultBatch      = 64
	MaxBatch          = 512
)

// xdpPacketHeadroom is XDP_PACKET_HEADROOM: the kernel keeps this much
// before the packet in every received frame (it is where an XDP program's
// bpf_xdp_adjust_head grows into).
const xdpPacketHeadroom = 256

// addrMask keeps the address part of a descriptor; in unaligned mode the
// bits above it carry the data offset within the chunk.
const (
	unalignedOffsetShift = 48
	addrMask             = 1<<unalignedOffsetShift - 1
)

// UMEMOptions shape a UMEM. The zero value is 4096 frames of 4096 bytes.
type UMEMOptions struct {
	// FrameSize is the size of each frame (chunk): 2048 or 4096 (default).
	FrameSize int
	// FrameCount is the number of frames (default 4096). Every socket
	// using the UMEM takes its Options.Frames from these.
	FrameCount int
	// Headroom is space the kernel leaves free before the packet data of
	// every received frame, on top of its own 256 bytes, for the
	// application to prepend headers into. Default 0.
	Headroom int
	// Unaligned registers the UMEM in unaligned chunk mode
	// (XDP_UMEM_UNALIGNED_CHUNK_FLAG): descriptors may point anywhere in a
	// chunk and carry the data offset in their top 16 bits. Frames are
	// still handed out at multiples of FrameSize.
	Unaligned bool
	// Debug checks every frame the kernel hands back against the frame's
	// recorded state and panics on a frame that is not where the
	// accounting says it is. Frames passed in by the caller are always
	// checked.
	Debug bool
}

// UMEM is the packet memory shared by one or more sockets: FrameCount
// frames of FrameSize bytes, registered with the kernel by the first socket
// opened on it and shared (XDP_SHARED_UMEM) by the others.
//
// The UMEM tracks where every frame is (see Accounting). Frames belong to
// the UMEM's pool until a socket takes its share at Open, and return to the
// pool when that socket closes.
//
// Methods of UMEM are safe for concurrent use; they touch only setup state.
// The hot paths live on Socket.
type UMEM struct {
	mem        []byte
	frameSize  uint64
	frameShift uint
	count      int
	headroom   uint32
	unaligned  bool
	debug      bool

	mu      sync.Mutex
	pool    []uint64 // frames owned by no socket, by base address
	inPool  []bool   // by frame index: the frame is in pool
	sockets []*Socket
	byID    map[uint16]*Socket
	closed  bool

	// Settings of the socket that registered the UMEM with the kernel;
	// sockets sharing it inherit them.
	zeroCopy   bool
	needWakeup bool
	shared     bool // a socket has registered the UMEM (it is live in the kernel)
}

// Frame places, as recorded per frame in Socket.state. Each socket records
// only the frames it owns, so its record is written by one goroutine.
const (
	placeNone uint8 = iota // not owned by this socket
	placeFree              // on a socket's free list
	placeFill              // lent to the kernel for receiving: fill ring, driver, RX ring
	placeHeld              // held by the application (received, or taken with Alloc)
	placeTX                // lent to the kernel for sending: TX ring, driver, completion ring
	numPlaces
)

var placeNames = [numPlaces]string{"not owned", "free", "fill", "held", "tx"}

// NewUMEM allocates and maps the packet memory. Registration with the
// kernel happens when the first socket is opened on it.
func NewUMEM(opts UMEMOptions) (*UMEM, error) {
	if opts.FrameSize == 0 {
		opts.FrameSize = DefaultFrameSize
	}
	if opts.FrameCount == 0 {
		opts.FrameCount = DefaultFrameCount
	}
	if opts.FrameSize != FrameSize2K && opts.FrameSize != FrameSize4K {
		return nil, fmt.Errorf("xsk: frame size %d: %w (use 2048 or 4096)", opts.FrameSize, ErrInvalidOptions)
	}
	if opts.FrameCount < 1 || opts.FrameCount > 1<<24 {
		return nil, fmt.Errorf("xsk: frame count %d: %w (use 1 to 16M)", opts.FrameCount, ErrInvalidOptions)
	}
	// The kernel needs room for its own headroom plus a minimal frame.
	if opts.Headroom < 0 || opts.Headroom > opts.FrameSize-xdpPacketHeadroom-128 {
		return nil, fmt.Errorf("xsk: headroom %d: %w (at most frame size - 384)", opts.Headroom, ErrInvalidOptions)
	}
	size := opts.FrameSize * opts.FrameCount
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("xsk: map %d bytes of UMEM: %w", size, err)
	}
	u := &UMEM{
		mem:        mem,
		frameSize:  uint64(opts.FrameSize),
		frameShift: uint(bits.TrailingZeros(uint(opts.FrameSize))),
		count:      opts.FrameCount,
		headroom:   uint32(opts.Headroom),
		unaligned:  opts.Unaligned,
		debug:      opts.Debug,
		pool:       make([]uint64, opts.FrameCount),
		inPool:     make([]bool, opts.FrameCount),
		byID:       make(map[uint16]*Socket),
	}
	// Pool as a stack: the lowest addresses are taken first.
	for i := range u.pool {
		u.pool[i] = uint64(opts.FrameCount-1-i) * u.frameSize
		u.inPool[i] = true
	}
	return u, nil
}

// FrameSize returns the size of each frame in bytes.
func (u *UMEM) FrameSize() int { return int(u.frameSize) }

// FrameCount returns the number of frames.
func (u *UMEM) FrameCount() int { return u.count }

// Close closes every socket still open on the UMEM and unmaps its memory.
// Frames received from those sockets must not be used afterwards.
func (u *UMEM) Close() error {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil
	}
	socks := append([]*Socket(nil), u.sockets...)
	u.mu.Unlock()

	var errs []error
	for _, s := range socks {
		errs = append(errs, s.Close())
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed { // a socket's Close closed its private UMEM meanwhile
		return errors.Join(errs...)
	}
	u.closed = true
	if err := unix.Munmap(u.mem); err != nil {
		errs = append(errs, fmt.Errorf("xsk: unmap UMEM: %w", err))
	}
	u.mem = nil
	return errors.Join(errs...)
}

// take lends n frames from the pool to a socket; u.mu must be held.
func (u *UMEM) take(n int) ([]uint64, error) {
	if n > len(u.pool) {
		return nil, fmt.Errorf("xsk: socket wants %d frames but the UMEM has %d of %d left: %w "+
			"(raise UMEMOptions.FrameCount or lower Options.Frames)", n, len(u.pool), u.count, ErrInvalidOptions)
	}
	got := make([]uint64, n, u.count) // capacity for every frame: appends never allocate
	copy(got, u.pool[len(u.pool)-n:])
	u.pool = u.pool[:len(u.pool)-n]
	for _, a := range got {
		u.inPool[a>>u.frameShift] = false
	}
	return got, nil
}

// giveBack returns frames (by index) to the pool.
func (u *UMEM) giveBack(idx []uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, i := range idx {
		u.inPool[i] = true
		u.pool = append(u.pool, i<<u.frameShift)
	}
}

// frameIndex returns the index of the frame containing UMEM offset addr
// (a descriptor address, with any unaligned offset bits stripped).
func (u *UMEM) frameIndex(addr uint64) uint64 { return (addr & addrMask) >> u.frameShift }

// placeError describes a frame that is not where the caller said it was.
func (u *UMEM) placeError(addr uint64, want uint8) error {
	i := u.frameIndex(addr)
	if i >= uint64(u.count) {
		return fmt.Errorf("%w: address %#x is outside the UMEM (%d frames of %d bytes)", ErrInvalidFrame, addr, u.count, u.frameSize)
	}
	return fmt.Errorf("%w: frame %d (address %#x) is not %s", ErrInvalidFrame, i, addr, placeNames[want])
}

// socketIDs hands out socket ids, which tag the frames a socket hands out
// (Frame.addr) so that Release and Transmit can tell whose frame it is.
// They come from one counter for the whole process, not one per UMEM:
// per UMEM, every socket with a private UMEM would be 1, and a frame of one
// would pass for the frame at the same offset of another. (Ids repeat only
// after 65535 Opens, and never within one UMEM.)
var socketIDs atomic.Uint32

// addSocket registers s and gives it an id; u.mu must be held.
func (u *UMEM) addSocket(s *Socket) error {
	for range 1 << 16 {
		id := uint16(socketIDs.Add(1))
		if _, used := u.byID[id]; !used && id != 0 {
			s.id = id
			u.byID[s.id] = s
			u.sockets = append(u.sockets, s)
			return nil
		}
	}
	return fmt.Errorf("xsk: more than 65535 sockets on one UMEM: %w", ErrInvalidOptions)
}

func (u *UMEM) removeSocket(s *Socket) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, x := range u.sockets {
		if x == s {
			u.sockets = append(u.sockets[:i], u.sockets[i+1:]...)
			break
		}
	}
	delete(u.byID, s.id)
	if len(u.sockets) == 0 {
		// The kernel's umem went away with its last socket; the next
		// Open registers the memory afresh.
		u.shared = false
	}
}

package xsk

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ring is one of the four single-producer, single-consumer rings a socket
// shares with the kernel: entries are UMEM addresses (uint64) for the fill
// and completion rings and descriptors (unix.XDPDesc) for RX and TX.
//
// For each ring one side produces and the other consumes. Whichever side we
// are, we publish our own index with a release store (storeRelease) only
// after the entries are written (producer) or read (consumer), and load the
// kernel's index with an atomic load (at least acquire) before touching the
// entries it covers, which is what the kernel's side pairs with
// (smp_load_acquire/smp_store_release in net/xdp/xsk_queue.h).
//
// The kernel's index is cached and reloaded only when the cache cannot
// satisfy a request, so in steady state a batch costs one load of the
// shared cache line and one store.
//
// A ring is not safe for concurrent use: it belongs to the goroutine that
// drives its socket.
type ring[T any] struct {
	producer *uint32 // in the mapping; written only by the producing side
	consumer *uint32 // in the mapping; written only by the consuming side
	flags    *uint32 // in the mapping; written only by the kernel (XDP_RING_NEED_WAKEUP)
	entries  []T     // in the mapping; len(entries) == size
	mask     uint32
	size     uint32

	// Our copies. As producer: prod is our next free slot, cons the
	// kernel's consumer index plus size (so cons-prod is the free space).
	// As consumer: cons is our next entry to read, prod the kernel's
	// producer index as last loaded.
	prod uint32
	cons uint32

	mem []byte // the whole mapping, for munmap
}

// mapRing maps the ring at pgoff of fd with n entries laid out as off says.
func mapRing[T any](fd int, pgoff int64, off unix.XDPRingOffset, n uint32, producer bool) (*ring[T], error) {
	length := int(off.Desc + uint64(n)*entrySize[T]())
	mem, err := unix.Mmap(fd, pgoff, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	r := &ring[T]{mem: mem, mask: n - 1, size: n}
	r.producer, r.consumer, r.flags, r.entries = ringView[T](mem, off, n)
	r.prod = atomic.LoadUint32(r.producer)
	r.cons = atomic.LoadUint32(r.consumer)
	if producer {
		r.cons += n
	}
	return r, nil
}

func (r *ring[T]) unmap() error {
	if r == nil || r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	r.entries = nil
	return err
}

// --- producer side (fill, TX) ---

// free returns how many entries can be reserved, up to want, reloading the
// kernel's consumer index only when the cached value cannot cover want.
func (r *ring[T]) free(want uint32) uint32 {
	n := r.cons - r.prod
	if n >= want {
		return want
	}
	r.cons = atomic.LoadUint32(r.consumer) + r.size
	n = r.cons - r.prod
	if n > want {
		n = want
	}
	return n
}

// at returns the entry for ring index i (free-running, masked here).
func (r *ring[T]) at(i uint32) *T { return &r.entries[i&r.mask] }

// submit publishes entries [old prod, prod+n) to the kernel. The entries
// must already be written: the atomic store orders them before the index.
func (r *ring[T]) submit(n uint32) {
	r.prod += n
	storeRelease(r.producer, r.prod)
}

// needWakeup reports whether the kernel asked to be woken for this ring.
func (r *ring[T]) needWakeup() bool {
	return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0
}

// --- consumer side (RX, completion) ---

// avail returns how many entries can be read, up to want, reloading the
// kernel's producer index only when the cached value cannot cover want.
func (r *ring[T]) avail(want uint32) uint32 {
	n := r.prod - r.cons
	if n < want {
		r.prod = atomic.LoadUint32(r.producer)
		n = r.prod - r.cons
	}
	if n > want {
		n = want
	}
	return n
}

// release hands n read entries back to the kernel. The entries must have
// been copied out first: the store orders those reads before the index.
func (r *ring[T]) release(n uint32) {
	r.cons += n
	storeRelease(r.consumer, r.cons)
}

// --- inspection (accounting, debug checks) ---

// kernelProducer and kernelConsumer load the indices as they are now.
func (r *ring[T]) kernelProducer() uint32 { return atomic.LoadUint32(r.producer) }
func (r *ring[T]) kernelConsumer() uint32 { return atomic.LoadUint32(r.consumer) }

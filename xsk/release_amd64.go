package xsk

// storeRelease publishes a ring index: the stores to the ring's entries
// (producer) or the loads from them (consumer) before it must be visible
// to the kernel before the index is, which is what the kernel's side
// pairs with (smp_load_acquire in net/xdp/xsk_queue.h), and what libxdp
// does with smp_store_release: on amd64, a plain store.
//
// Go's atomic.StoreUint32 is sequentially consistent, an XCHG on amd64,
// which also waits for every earlier store to reach the cache: in poll
// mode's drop loop the two per batch (RX consumer, fill producer) took a
// fifth of its user-space time, waiting for the lines of the fill ring
// the kernel had just read (docs/BENCHMARKS.md, "Poll mode: CPU per
// frame"). The function is in assembly so that the compiler can neither
// inline it nor move the ring accesses across it.
//
//go:noescape
func storeRelease(p *uint32, v uint32)

//go:build !amd64

package xsk

import "sync/atomic"

// storeRelease publishes a ring index: the stores to the ring's entries
// (producer) or the loads from them (consumer) before it must be visible
// to the kernel before the index is. Elsewhere than amd64 an atomic store
// (sequentially consistent, so at least release) does it.
func storeRelease(p *uint32, v uint32) { atomic.StoreUint32(p, v) }

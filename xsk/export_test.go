package xsk

import (
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// UMEMAddr returns where u's memory is mapped, for the leak test.
func UMEMAddr(u *UMEM) uint64 {
	a, err := strconv.ParseUint(fmt.Sprintf("%p", u.mem)[2:], 16, 64)
	if err != nil {
		panic(err)
	}
	return a
}

// MapRing maps entries entries of one of s's rings ("fill", "completion",
// "rx", "tx") as the kernel lays it out, and unmaps it again: the kernel
// refuses a mapping longer than the ring it made, so this tells the ring
// sizes it really has.
func MapRing(s *Socket, which string, entries int) error {
	off, err := getMmapOffsets(s.fd)
	if err != nil {
		return err
	}
	var r *ring[uint64]
	var d *ring[unix.XDPDesc]
	switch which {
	case "fill":
		r, err = mapRing[uint64](s.fd, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, uint32(entries), true)
	case "completion":
		r, err = mapRing[uint64](s.fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, uint32(entries), false)
	case "rx":
		d, err = mapRing[unix.XDPDesc](s.fd, unix.XDP_PGOFF_RX_RING, off.Rx, uint32(entries), false)
	case "tx":
		d, err = mapRing[unix.XDPDesc](s.fd, unix.XDP_PGOFF_TX_RING, off.Tx, uint32(entries), true)
	default:
		return fmt.Errorf("no ring %q", which)
	}
	if err != nil {
		return err
	}
	if r != nil {
		return unix.Munmap(r.mem)
	}
	return unix.Munmap(d.mem)
}

package ethtool

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file holds the package's only unsafe code: the requests
// golang.org/x/sys/unix has no helper for pass a pointer to a struct of
// their own inside struct ifreq (unix.Ifreq does not expose that field).

type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte // pad to sizeof(struct ifreq)
}

func (s *Socket) ioctl(name string, data unsafe.Pointer) error {
	var ifr ifreqData
	copy(ifr.name[:], name)
	ifr.data = data
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(s.fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	if errno != 0 {
		return errno
	}
	return nil
}

// value issues a request on struct ethtool_value { u32 cmd, data; } and
// returns data as the kernel left it.
func (s *Socket) value(name string, cmd, data uint32) (uint32, error) {
	v := [2]uint32{cmd, data}
	err := s.ioctl(name, unsafe.Pointer(&v[0]))
	return v[1], err
}

// strings returns the n names of the statistics, gstringLen bytes each:
// struct ethtool_gstrings { u32 cmd, string_set, len; u8 data[]; }.
func (s *Socket) strings(name string, n int) ([]byte, error) {
	buf := make([]uint32, 3+(n*gstringLen+3)/4)
	buf[0], buf[1], buf[2] = unix.ETHTOOL_GSTRINGS, ssStats, uint32(n)
	if err := s.ioctl(name, unsafe.Pointer(&buf[0])); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&buf[3])), n*gstringLen), nil
}

// stats returns the n values of the statistics:
// struct ethtool_stats { u32 cmd, n_stats; u64 data[]; }.
func (s *Socket) stats(name string, n int) ([]uint64, error) {
	buf := make([]uint64, 1+n)
	hdr := (*[2]uint32)(unsafe.Pointer(&buf[0]))
	hdr[0], hdr[1] = unix.ETHTOOL_GSTATS, uint32(n)
	if err := s.ioctl(name, unsafe.Pointer(&buf[0])); err != nil {
		return nil, err
	}
	return buf[1:], nil
}

package benchmark

import (
	"bytes"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file holds the package's only unsafe code: the ethtool ioctls that
// read a driver's name and its statistics (`ethtool -i`, `ethtool -S`),
// which pass pointers to variable-length structs inside struct ifreq.

const (
	ethtoolGDrvInfo = 0x03 // ETHTOOL_GDRVINFO
	ethtoolGStrings = 0x1b // ETHTOOL_GSTRINGS
	ethtoolGStats   = 0x1d // ETHTOOL_GSTATS
	ethSSStats      = 1    // ETH_SS_STATS
	ethGStringLen   = 32   // ETH_GSTRING_LEN
)

// drvInfo mirrors struct ethtool_drvinfo.
type drvInfo struct {
	cmd         uint32
	driver      [32]byte
	version     [32]byte
	fwVersion   [32]byte
	busInfo     [32]byte
	eromVersion [32]byte
	reserved2   [12]byte
	nPrivFlags  uint32
	nStats      uint32
	testinfoLen uint32
	eedumpLen   uint32
	regdumpLen  uint32
}

type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte // pad to sizeof(struct ifreq)
}

// ethtoolSocket reads driver names and statistics (`ethtool -i`, `ethtool
// -S`) of the interfaces in the network namespace it was opened in.
type ethtoolSocket struct{ fd int }

// openEthtool opens the socket in the calling thread's network namespace;
// it keeps working from any thread.
func openEthtool() (*ethtoolSocket, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ethtool socket: %w", err)
	}
	return &ethtoolSocket{fd: fd}, nil
}

func (e *ethtoolSocket) Close() error { return unix.Close(e.fd) }

// driver returns the name of the driver of interface name and how many
// statistics it has.
func (e *ethtoolSocket) driver(name string) (string, int, error) {
	if len(name) >= unix.IFNAMSIZ {
		return "", 0, fmt.Errorf("interface name %q too long", name)
	}
	info := drvInfo{cmd: ethtoolGDrvInfo}
	if err := ethtoolIoctl(e.fd, name, unsafe.Pointer(&info)); err != nil {
		return "", 0, fmt.Errorf("ethtool -i %s: %w", name, err)
	}
	return string(bytes.TrimRight(info.driver[:], "\x00")), int(info.nStats), nil
}

// stats returns the statistics of interface name by name, as `ethtool -S`
// shows them.
func (e *ethtoolSocket) stats(name string) (map[string]uint64, error) {
	_, n, err := e.driver(name)
	if err != nil || n == 0 {
		return map[string]uint64{}, err
	}
	// struct ethtool_gstrings { u32 cmd, string_set, len; u8 data[]; }
	sbuf := make([]byte, 12+n*ethGStringLen)
	*(*uint32)(unsafe.Pointer(&sbuf[0])) = ethtoolGStrings
	*(*uint32)(unsafe.Pointer(&sbuf[4])) = ethSSStats
	*(*uint32)(unsafe.Pointer(&sbuf[8])) = uint32(n)
	if err := ethtoolIoctl(e.fd, name, unsafe.Pointer(&sbuf[0])); err != nil {
		return nil, fmt.Errorf("ethtool -S %s (names): %w", name, err)
	}
	// struct ethtool_stats { u32 cmd, n_stats; u64 data[]; }
	vbuf := make([]uint64, 1+n)
	*(*uint32)(unsafe.Pointer(&vbuf[0])) = ethtoolGStats
	*(*uint32)(unsafe.Add(unsafe.Pointer(&vbuf[0]), 4)) = uint32(n)
	if err := ethtoolIoctl(e.fd, name, unsafe.Pointer(&vbuf[0])); err != nil {
		return nil, fmt.Errorf("ethtool -S %s: %w", name, err)
	}
	stats := make(map[string]uint64, n)
	for i := range n {
		s := sbuf[12+i*ethGStringLen : 12+(i+1)*ethGStringLen]
		stats[string(bytes.TrimRight(s, "\x00"))] += vbuf[1+i]
	}
	return stats, nil
}

func ethtoolIoctl(fd int, name string, data unsafe.Pointer) error {
	var ifr ifreqData
	copy(ifr.name[:], name)
	ifr.data = data
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	if errno != 0 {
		return errno
	}
	return nil
}

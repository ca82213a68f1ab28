package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file holds the package's only unsafe code: the legacy ethtool ioctl
// for GRO, which needs a pointer to a struct inside struct ifreq.

const (
	ethtoolGGRO = 0x2b // ETHTOOL_GGRO
	ethtoolSGRO = 0x2c // ETHTOOL_SGRO
)

type ethtoolValue struct {
	cmd  uint32
	data uint32
}

type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte // pad to sizeof(struct ifreq)
}

// SetGRO turns GRO on or off on interface name in the calling thread's
// namespace, as `ethtool -K name gro on|off` does.
func SetGRO(name string, on bool) error {
	v := ethtoolValue{cmd: ethtoolSGRO}
	if on {
		v.data = 1
	}
	if err := ethtoolIoctl(name, &v); err != nil {
		return fmt.Errorf("sandbox: set GRO on %s: %w", name, err)
	}
	return nil
}

// GRO reports whether GRO is on at interface name.
func GRO(name string) (bool, error) {
	v := ethtoolValue{cmd: ethtoolGGRO}
	if err := ethtoolIoctl(name, &v); err != nil {
		return false, fmt.Errorf("sandbox: get GRO on %s: %w", name, err)
	}
	return v.data != 0, nil
}

func ethtoolIoctl(name string, v *ethtoolValue) error {
	if len(name) >= unix.IFNAMSIZ {
		return fmt.Errorf("interface name %q too long", name)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var ifr ifreqData
	copy(ifr.name[:], name)
	ifr.data = unsafe.Pointer(v)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	if errno != 0 {
		return errno
	}
	return nil
}

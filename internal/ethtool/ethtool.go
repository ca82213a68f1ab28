package ethtool

import (
	"bytes"
	"fmt"

	"golang.org/x/sys/unix"
)

const (
	gstringLen = 32 // ETH_GSTRING_LEN: each statistic's name is a fixed 32-byte field
	ssStats    = 1  // ETH_SS_STATS, the string set of `ethtool -S` (not in x/sys/unix)
)

// Socket issues ethtool requests in the network namespace it was opened in.
type Socket struct{ fd int }

// Open opens a Socket in the calling thread's network namespace.
func Open() (*Socket, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ethtool socket: %w", err)
	}
	return &Socket{fd: fd}, nil
}

// Close closes the socket.
func (s *Socket) Close() error { return unix.Close(s.fd) }

func checkName(name string) error {
	if len(name) >= unix.IFNAMSIZ {
		return fmt.Errorf("interface name %q too long", name)
	}
	return nil
}

// Driver returns the name of the driver of interface name and how many
// statistics it has (`ethtool -i`).
func (s *Socket) Driver(name string) (string, int, error) {
	if err := checkName(name); err != nil {
		return "", 0, err
	}
	info, err := unix.IoctlGetEthtoolDrvinfo(s.fd, name)
	if err != nil {
		return "", 0, fmt.Errorf("ethtool -i %s: %w", name, err)
	}
	return string(bytes.TrimRight(info.Driver[:], "\x00")), int(info.N_stats), nil
}

// Stats returns the statistics of interface name by name, as `ethtool -S`
// shows them (a name the driver repeats is summed).
func (s *Socket) Stats(name string) (map[string]uint64, error) {
	_, n, err := s.Driver(name)
	if err != nil || n == 0 {
		return map[string]uint64{}, err
	}
	names, err := s.strings(name, n)
	if err != nil {
		return nil, fmt.Errorf("ethtool -S %s (names): %w", name, err)
	}
	values, err := s.stats(name, n)
	if err != nil {
		return nil, fmt.Errorf("ethtool -S %s: %w", name, err)
	}
	stats := make(map[string]uint64, n)
	for i := range n {
		k := names[i*gstringLen : (i+1)*gstringLen]
		stats[string(bytes.TrimRight(k, "\x00"))] += values[i]
	}
	return stats, nil
}

// GRO reports whether generic receive offload is on at interface name
// (`ethtool -k`).
func (s *Socket) GRO(name string) (bool, error) {
	if err := checkName(name); err != nil {
		return false, err
	}
	v, err := s.value(name, unix.ETHTOOL_GGRO, 0)
	if err != nil {
		return false, fmt.Errorf("ethtool -k %s: %w", name, err)
	}
	return v != 0, nil
}

// SetGRO turns generic receive offload on or off at interface name
// (`ethtool -K name gro on|off`).
func (s *Socket) SetGRO(name string, on bool) error {
	if err := checkName(name); err != nil {
		return err
	}
	var v uint32
	if on {
		v = 1
	}
	if _, err := s.value(name, unix.ETHTOOL_SGRO, v); err != nil {
		return fmt.Errorf("ethtool -K %s gro %s: %w", name, onOff(on), err)
	}
	return nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

package loader

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Mode is where in the receive path an XDP program runs.
type Mode uint8

const (
	// ModeAuto picks driver mode where the device supports native XDP and
	// generic mode elsewhere. It never picks offload.
	ModeAuto Mode = iota
	// ModeDriver runs the program in the driver (native XDP), before any
	// skb is allocated.
	ModeDriver
	// ModeGeneric runs the program on the skb, for any device (slower).
	ModeGeneric
	// ModeOffload runs the program on the NIC. The program must have been
	// loaded for that device (ProgramSpec.IfIndex).
	ModeOffload
)

var modeNames = [...]string{ModeAuto: "auto", ModeDriver: "driver", ModeGeneric: "generic", ModeOffload: "offload"}

// String returns auto, driver, generic or offload.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode parses a mode name: auto, driver (or native, drv), generic (or
// skb) and offload (or hw), case-insensitively.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto", "":
		return ModeAuto, nil
	case "driver", "native", "drv":
		return ModeDriver, nil
	case "generic", "skb":
		return ModeGeneric, nil
	case "offload", "hw":
		return ModeOffload, nil
	}
	return ModeAuto, fmt.Errorf("unknown XDP mode %q: use auto, driver, generic or offload", s)
}

// MarshalText makes a Mode its name in JSON.
func (m Mode) MarshalText() ([]byte, error) {
	if int(m) >= len(modeNames) {
		return nil, fmt.Errorf("invalid XDP mode %d", uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText parses a mode name.
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

func (m Mode) valid() bool { return int(m) < len(modeNames) }

// linkFlags are the bpf_link attach flags for a concrete mode.
func (m Mode) linkFlags() link.XDPAttachFlags {
	switch m {
	case ModeDriver:
		return link.XDPDriverMode
	case ModeGeneric:
		return link.XDPGenericMode
	case ModeOffload:
		return link.XDPOffloadMode
	}
	return 0
}

// netlinkFlags are the IFLA_XDP_FLAGS mode bits for a concrete mode.
func (m Mode) netlinkFlags() uint32 {
	switch m {
	case ModeDriver:
		return unix.XDP_FLAGS_DRV_MODE
	case ModeGeneric:
		return unix.XDP_FLAGS_SKB_MODE
	case ModeOffload:
		return unix.XDP_FLAGS_HW_MODE
	}
	return 0
}

// Method is how a program was attached.
type Method uint8

const (
	// MethodLink is a bpf_link (Linux 5.9 and later): it can be pinned,
	// updated atomically, and detached only through the link.
	MethodLink Method = iota
	// MethodNetlink is the older rtnetlink attachment (IFLA_XDP), as
	// `ip link set dev IF xdp ...` makes.
	MethodNetlink
)

// String returns bpf_link or netlink.
func (m Method) String() string {
	switch m {
	case MethodLink:
		return "bpf_link"
	case MethodNetlink:
		return "netlink"
	}
	return fmt.Sprintf("Method(%d)", uint8(m))
}

// MarshalText makes a Method its name in JSON.
func (m Method) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText parses bpf_link or netlink.
func (m *Method) UnmarshalText(b []byte) error {
	switch string(b) {
	case "bpf_link":
		*m = MethodLink
	case "netlink":
		*m = MethodNetlink
	default:
		return fmt.Errorf("unknown attach method %q", b)
	}
	return nil
}

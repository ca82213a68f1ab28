package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Features are the XDP features a device reports through the netdev
// generic-netlink family (enum netdev_xdp_act, Linux 6.3 and later).
type Features uint64

// The bits of Features, as in include/uapi/linux/netdev.h.
const (
	// FeatureBasic: native XDP with XDP_ABORTED, DROP, PASS and TX.
	FeatureBasic Features = 1 << iota
	// FeatureRedirect: native XDP_REDIRECT.
	FeatureRedirect
	// FeatureNDOXmit: the device accepts frames redirected to it.
	FeatureNDOXmit
	// FeatureXSKZeroCopy: AF_XDP zero-copy.
	FeatureXSKZeroCopy
	// FeatureHWOffload: programs can be offloaded to the NIC.
	FeatureHWOffload
	// FeatureRxSG: multi-buffer (scatter-gather) frames on receive.
	FeatureRxSG
	// FeatureNDOXmitSG: multi-buffer frames redirected to the device.
	FeatureNDOXmitSG
)

var featureNames = []string{"basic", "redirect", "ndo-xmit", "xsk-zerocopy", "hw-offload", "rx-sg", "ndo-xmit-sg"}

// String lists the set features by their kernel names, comma-separated, or
// "none".
func (f Features) String() string {
	var names []string
	for i, n := range featureNames {
		if f&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if rest := f &^ (1<<len(featureNames) - 1); rest != 0 {
		names = append(names, fmt.Sprintf("%#x", uint64(rest)))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// ErrNoFeatureQuery reports that the kernel cannot tell a device's XDP
// features (the netdev generic-netlink family is Linux 6.3 and later).
var ErrNoFeatureQuery = errors.New("XDP feature query unavailable")

// netdev generic-netlink family, include/uapi/linux/netdev.h.
const (
	netdevFamily        = "netdev"
	netdevCmdDevGet     = 1
	netdevAttrIfindex   = 1
	netdevAttrXDPFeats  = 3
	netdevFamilyVersion = 1
)

// XDPFeatures asks the kernel which XDP features interface iface has. It
// wraps ErrNoFeatureQuery where the kernel has no such query, and
// ErrNoInterface where the interface does not exist.
func XDPFeatures(iface string) (Features, error) {
	l, err := lookupLink(iface)
	if err != nil {
		return 0, err
	}
	return queryFeatures(l.Attrs().Index)
}

func queryFeatures(ifindex int) (Features, error) {
	fam, err := netlink.GenlFamilyGet(netdevFamily)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, fmt.Errorf("%w: kernel has no %q generic-netlink family (Linux 6.3 or later)", ErrNoFeatureQuery, netdevFamily)
		}
		return 0, fmt.Errorf("%w: look up %q generic-netlink family: %w", ErrNoFeatureQuery, netdevFamily, err)
	}
	req := nl.NewNetlinkRequest(int(fam.ID), 0)
	req.AddData(genlHeader{netdevCmdDevGet, netdevFamilyVersion})
	req.AddData(nl.NewRtAttr(netdevAttrIfindex, nl.Uint32Attr(uint32(ifindex))))
	msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
	if err != nil {
		if errors.Is(err, unix.ENODEV) {
			return 0, fmt.Errorf("query XDP features of ifindex %d: %w: %w", ifindex, ErrNoInterface, err)
		}
		return 0, fmt.Errorf("%w: netdev dev-get for ifindex %d: %w", ErrNoFeatureQuery, ifindex, err)
	}
	for _, m := range msgs {
		if len(m) < nl.SizeofGenlmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofGenlmsg:])
		if err != nil {
			return 0, fmt.Errorf("%w: parse netdev reply: %w", ErrNoFeatureQuery, err)
		}
		for _, a := range attrs {
			if a.Attr.Type&nlaTypeMask == netdevAttrXDPFeats && len(a.Value) >= 8 {
				return Features(binary.NativeEndian.Uint64(a.Value)), nil
			}
		}
	}
	return 0, fmt.Errorf("%w: netdev reply for ifindex %d has no xdp-features", ErrNoFeatureQuery, ifindex)
}

// genlHeader is struct genlmsghdr. (nl.Genlmsg serialises four bytes of a
// two-byte struct, sending whatever follows it in memory as the reserved
// field, which the kernel's strict validation rejects with EINVAL.)
type genlHeader struct{ cmd, version uint8 }

func (h genlHeader) Len() int { return 4 }

func (h genlHeader) Serialize() []byte { return []byte{h.cmd, h.version, 0, 0} }

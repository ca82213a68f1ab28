package loader

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// lookupLink finds an interface by name, wrapping ErrNoInterface.
func lookupLink(name string) (netlink.Link, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: no interface name given", ErrNoInterface)
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
			return nil, fmt.Errorf("interface %q: %w (list interfaces with `ip link`; the lookup is in the calling thread's network namespace)", name, ErrNoInterface)
		}
		return nil, wrapErr(fmt.Sprintf("look up interface %q", name), err)
	}
	return l, nil
}

// Values of IFLA_XDP_ATTACHED.
const (
	xdpAttachedNone = iota
	xdpAttachedDrv
	xdpAttachedSKB
	xdpAttachedHW
	xdpAttachedMulti
)

// xdpProg is one program attached to an interface, as rtnetlink reports it.
type xdpProg struct {
	Mode Mode
	ID   uint32
}

// ifaceXDP is an interface and the XDP programs rtnetlink says it runs.
type ifaceXDP struct {
	Index int
	Name  string
	Progs []xdpProg
}

// listXDP dumps every interface in the calling thread's namespace with its
// XDP programs (one per mode; driver and generic exclude each other, but
// offload can sit beside either).
func listXDP() ([]ifaceXDP, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_DUMP)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, wrapErr("list interfaces", err)
	}
	out := make([]ifaceXDP, 0, len(msgs))
	for _, m := range msgs {
		x, err := parseLinkMsg(m)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// getXDP reports the XDP programs of one interface.
func getXDP(ifindex int) (ifaceXDP, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, 0)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(ifindex)
	req.AddData(msg)
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		if errors.Is(err, unix.ENODEV) {
			return ifaceXDP{}, fmt.Errorf("ifindex %d: %w", ifindex, ErrNoInterface)
		}
		return ifaceXDP{}, wrapErr(fmt.Sprintf("query XDP state of ifindex %d", ifindex), err)
	}
	if len(msgs) != 1 {
		return ifaceXDP{}, fmt.Errorf("query XDP state of ifindex %d: %d replies", ifindex, len(msgs))
	}
	return parseLinkMsg(msgs[0])
}

func parseLinkMsg(m []byte) (ifaceXDP, error) {
	if len(m) < unix.SizeofIfInfomsg {
		return ifaceXDP{}, errors.New("parse RTM_NEWLINK: short message")
	}
	info := nl.DeserializeIfInfomsg(m)
	attrs, err := nl.ParseRouteAttr(m[unix.SizeofIfInfomsg:])
	if err != nil {
		return ifaceXDP{}, fmt.Errorf("parse RTM_NEWLINK: %w", err)
	}
	x := ifaceXDP{Index: int(info.Index)}
	for _, a := range attrs {
		switch a.Attr.Type & nlaTypeMask {
		case unix.IFLA_IFNAME:
			x.Name = unix.ByteSliceToString(a.Value)
		case unix.IFLA_XDP:
			x.Progs, err = parseXDPAttr(a.Value)
			if err != nil {
				return ifaceXDP{}, err
			}
		}
	}
	return x, nil
}

func parseXDPAttr(b []byte) ([]xdpProg, error) {
	attrs, err := nl.ParseRouteAttr(b)
	if err != nil {
		return nil, fmt.Errorf("parse IFLA_XDP: %w", err)
	}
	var attached uint8
	var progID, drv, skb, hw uint32
	u32 := func(v []byte) uint32 {
		if len(v) < 4 {
			return 0
		}
		return binary.NativeEndian.Uint32(v)
	}
	for _, a := range attrs {
		switch a.Attr.Type & nlaTypeMask {
		case unix.IFLA_XDP_ATTACHED:
			if len(a.Value) > 0 {
				attached = a.Value[0]
			}
		case unix.IFLA_XDP_PROG_ID:
			progID = u32(a.Value)
		case unix.IFLA_XDP_DRV_PROG_ID:
			drv = u32(a.Value)
		case unix.IFLA_XDP_SKB_PROG_ID:
			skb = u32(a.Value)
		case unix.IFLA_XDP_HW_PROG_ID:
			hw = u32(a.Value)
		}
	}
	switch attached {
	case xdpAttachedNone:
		return nil, nil
	case xdpAttachedDrv:
		return []xdpProg{{ModeDriver, progID}}, nil
	case xdpAttachedSKB:
		return []xdpProg{{ModeGeneric, progID}}, nil
	case xdpAttachedHW:
		return []xdpProg{{ModeOffload, progID}}, nil
	}
	var ps []xdpProg
	for _, p := range []xdpProg{{ModeDriver, drv}, {ModeGeneric, skb}, {ModeOffload, hw}} {
		if p.ID != 0 {
			ps = append(ps, p)
		}
	}
	return ps, nil
}

// setXDP is the rtnetlink XDP attach: fd -1 detaches. With
// XDP_FLAGS_REPLACE in flags the kernel changes the program only if the one
// attached is expectedFD (-1: none), which makes replace and detach safe
// against a program someone else put there meanwhile.
func setXDP(ifindex, fd, expectedFD int, flags uint32) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(ifindex)
	req.AddData(msg)
	xdp := nl.NewRtAttr(unix.IFLA_XDP|unix.NLA_F_NESTED, nil)
	xdp.AddRtAttr(unix.IFLA_XDP_FD, nl.Uint32Attr(uint32(int32(fd))))
	if flags != 0 {
		xdp.AddRtAttr(unix.IFLA_XDP_FLAGS, nl.Uint32Attr(flags))
	}
	if flags&unix.XDP_FLAGS_REPLACE != 0 {
		xdp.AddRtAttr(unix.IFLA_XDP_EXPECTED_FD, nl.Uint32Attr(uint32(int32(expectedFD))))
	}
	req.AddData(xdp)
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// nlaTypeMask strips NLA_F_NESTED and NLA_F_NET_BYTEORDER from an
// attribute type.
const nlaTypeMask = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)

package capture

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Describe sums a frame up in one line, the way tcpdump -nn does:
// "IP 198.51.100.7.4000 > 192.0.2.9.11211: UDP, length 18". data may be
// cut short (a snap length); what is missing is said, not guessed.
func Describe(data []byte) string {
	be := binary.BigEndian
	if len(data) < 14 {
		return fmt.Sprintf("[|ether] %d bytes", len(data))
	}
	et := be.Uint16(data[12:14])
	off := 14
	vlan := ""
	for tags := 0; (et == 0x8100 || et == 0x88a8) && tags < 2; tags++ {
		if len(data) < off+4 {
			return "[|vlan]"
		}
		vlan += fmt.Sprintf("vlan %d, ", be.Uint16(data[off:off+2])&0xfff)
		et = be.Uint16(data[off+2 : off+4])
		off += 4
	}
	b := data[off:]
	var src, dst netip.Addr
	var proto uint8
	var l4 []byte
	var fam string
	switch et {
	case 0x0800:
		if len(b) < 20 {
			return vlan + "IP [|ip]"
		}
		ihl := int(b[0]&0xf) * 4
		src, dst = netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
		proto, fam = b[9], "IP"
		if be.Uint16(b[6:8])&0x1fff != 0 {
			return fmt.Sprintf("%sIP %s > %s: fragment, proto %d", vlan, src, dst, proto)
		}
		if ihl >= 20 && len(b) >= ihl {
			l4 = b[ihl:]
		}
	case 0x86dd:
		if len(b) < 40 {
			return vlan + "IP6 [|ip6]"
		}
		src, dst = netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40]))
		proto, fam, l4 = b[6], "IP6", b[40:]
	case 0x0806:
		return vlan + "ARP, length " + fmt.Sprint(len(b))
	default:
		return fmt.Sprintf("%sethertype 0x%04x, length %d", vlan, et, len(data))
	}
	switch proto {
	case 6, 17:
		name := "UDP"
		if proto == 6 {
			name = "TCP"
		}
		if len(l4) < 4 {
			return fmt.Sprintf("%s%s %s > %s: %s [|%s]", vlan, fam, src, dst, name, name)
		}
		sp, dp := be.Uint16(l4[0:2]), be.Uint16(l4[2:4])
		s := fmt.Sprintf("%s%s %s.%d > %s.%d: %s", vlan, fam, src, sp, dst, dp, name)
		if proto == 17 && len(l4) >= 8 {
			s += fmt.Sprintf(", length %d", int(be.Uint16(l4[4:6]))-8)
		}
		return s
	case 1, 58:
		name := "ICMP"
		if proto == 58 {
			name = "ICMP6"
		}
		if len(l4) >= 2 {
			return fmt.Sprintf("%s%s %s > %s: %s type %d code %d", vlan, fam, src, dst, name, l4[0], l4[1])
		}
		return fmt.Sprintf("%s%s %s > %s: %s", vlan, fam, src, dst, name)
	}
	return fmt.Sprintf("%s%s %s > %s: proto %d", vlan, fam, src, dst, proto)
}

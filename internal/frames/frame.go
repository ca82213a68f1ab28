package frames

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
)

// UDP4 builds an IPv4/UDP frame with a payload of payloadLen bytes 0, 1,
// 2, ... (mod 256) and no padding. It panics if src or dst is not an IPv4
// literal.
func UDP4(src, dst string, sport, dport uint16, payloadLen int) Frame {
	return simple("UDP4", true, ProtoUDP, src, dst, sport, dport, payloadLen)
}

// UDP6 is UDP4 over IPv6.
func UDP6(src, dst string, sport, dport uint16, payloadLen int) Frame {
	return simple("UDP6", false, ProtoUDP, src, dst, sport, dport, payloadLen)
}

// TCP4 builds an IPv4/TCP SYN segment with no options, a payload of
// payloadLen bytes 0, 1, 2, ... (mod 256) and no padding. It panics if src
// or dst is not an IPv4 literal.
func TCP4(src, dst string, sport, dport uint16, payloadLen int) Frame {
	return simple("TCP4", true, ProtoTCP, src, dst, sport, dport, payloadLen)
}

// TCP6 is TCP4 over IPv6.
func TCP6(src, dst string, sport, dport uint16, payloadLen int) Frame {
	return simple("TCP6", false, ProtoTCP, src, dst, sport, dport, payloadLen)
}

func simple(name string, v4 bool, proto uint8, src, dst string, sport, dport uint16, payloadLen int) Frame {
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	if s.Is4() != v4 || d.Is4() != v4 {
		panic(fmt.Sprintf("frames: %s(%q, %q): wrong address family", name, src, dst))
	}
	return Spec{
		Src:     s,
		Dst:     d,
		Proto:   proto,
		SrcPort: sport,
		DstPort: dport,
		Payload: Pattern(payloadLen),
	}.Build()
}

// ARPRequest builds a broadcast ARP request from 02:00:00:00:00:01 asking
// for the IPv4 address target on behalf of sender. It panics if either is
// not an IPv4 literal.
func ARPRequest(sender, target string) Frame {
	s, t := netip.MustParseAddr(sender), netip.MustParseAddr(target)
	if !s.Is4() || !t.Is4() {
		panic(fmt.Sprintf("frames: ARPRequest(%q, %q): want IPv4 addresses", sender, target))
	}
	mac := [6]byte{0x02, 0, 0, 0, 0, 0x01}
	return Spec{
		SrcMAC:    mac,
		DstMAC:    [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		EtherType: EtherTypeARP,
		Payload:   arpBody(1, mac, s, [6]byte{}, t),
	}.Build()
}

// arpBody is an Ethernet/IPv4 ARP message (RFC 826).
func arpBody(op uint16, sha [6]byte, spa netip.Addr, tha [6]byte, tpa netip.Addr) []byte {
	b := make([]byte, 0, 28)
	b = binary.BigEndian.AppendUint16(b, 1) // hardware type: Ethernet
	b = binary.BigEndian.AppendUint16(b, EtherTypeIPv4)
	b = append(b, 6, 4)
	b = binary.BigEndian.AppendUint16(b, op)
	b = append(b, sha[:]...)
	b = append(b, spa.AsSlice()...)
	b = append(b, tha[:]...)
	b = append(b, tpa.AsSlice()...)
	return b
}

// Len returns the length of the frame in bytes.
func (f Frame) Len() int { return len(f.Bytes) }

// Clone returns a copy of f that shares no memory with it.
func (f Frame) Clone() Frame {
	f.Bytes = slices.Clone(f.Bytes)
	return f
}

// Truncate returns a copy of the first n bytes of f (all of them if n is
// larger), with the offsets of f even where they now point past the end.
func (f Frame) Truncate(n int) Frame {
	n = min(max(n, 0), len(f.Bytes))
	f.Bytes = slices.Clone(f.Bytes[:n:n])
	return f
}

// TruncateAt returns a copy of the bytes of f up to layerOffset+extra, for
// example f.TruncateAt(f.L4, 4) for a frame that ends in the middle of its
// L4 header. The end is clamped to the frame. It panics if layerOffset is
// negative, that is if the layer is absent.
func (f Frame) TruncateAt(layerOffset, extra int) []byte {
	if layerOffset < 0 {
		panic(fmt.Sprintf("frames: TruncateAt(%d, %d): the layer is absent", layerOffset, extra))
	}
	return f.Truncate(layerOffset + extra).Bytes
}

// SetByte returns a copy of f with the byte at off set to v. Like the other
// setters it leaves every checksum as it was.
func (f Frame) SetByte(off int, v byte) Frame {
	g := f.Clone()
	g.Bytes[off] = v
	return g
}

// SetUint16 returns a copy of f with the big-endian 16-bit field at off set
// to v.
func (f Frame) SetUint16(off int, v uint16) Frame {
	g := f.Clone()
	binary.BigEndian.PutUint16(g.Bytes[off:], v)
	return g
}

// CorruptIPv4IHL returns a copy of f with the IPv4 header length field set
// to ihl (4 bits, in 32-bit words). Like every Corrupt method on IPv4 it
// then recomputes the header checksum over the header the new IHL
// describes, if IHL is at least 5 and that header fits in the frame, so
// that the named field is the only thing wrong. It panics if f has no
// IPv4 header.
func (f Frame) CorruptIPv4IHL(ihl uint8) Frame {
	f.mustIPv4("CorruptIPv4IHL", 1)
	g := f.Clone()
	g.Bytes[g.L3] = g.Bytes[g.L3]&0xf0 | ihl&0x0f
	return g.FixIPv4Checksum()
}

// CorruptIPv4TotalLen returns a copy of f with the IPv4 total length set
// to n and the header checksum recomputed. It panics if f has no IPv4
// header.
func (f Frame) CorruptIPv4TotalLen(n uint16) Frame {
	f.mustIPv4("CorruptIPv4TotalLen", 4)
	g := f.Clone()
	binary.BigEndian.PutUint16(g.Bytes[g.L3+2:], n)
	return g.FixIPv4Checksum()
}

// CorruptIPVersion returns a copy of f with the IP version field (the high
// 4 bits of the first byte of the IPv4 or IPv6 header) set to v, and for an
// IPv4 EtherType the header checksum recomputed. It panics if f has no IP
// header.
func (f Frame) CorruptIPVersion(v uint8) Frame {
	if f.L3 < 0 || f.L3 >= len(f.Bytes) {
		panic(fmt.Sprintf("frames: CorruptIPVersion on a frame without an IP header (L3 %d, length %d)", f.L3, len(f.Bytes)))
	}
	g := f.Clone()
	g.Bytes[g.L3] = g.Bytes[g.L3]&0x0f | v<<4
	if g.etherType() == EtherTypeIPv4 {
		g = g.FixIPv4Checksum()
	}
	return g
}

// FixIPv4Checksum returns a copy of f with the IPv4 header checksum
// recomputed over the header that the IHL field describes. The copy is
// unchanged if f has no IPv4 EtherType before L3, if IHL is less than 5,
// or if the header does not fit in the frame.
func (f Frame) FixIPv4Checksum() Frame {
	g := f.Clone()
	if g.L3 < 2 || g.L3 >= len(g.Bytes) || g.etherType() != EtherTypeIPv4 {
		return g
	}
	hlen := int(g.Bytes[g.L3]&0x0f) * 4
	if hlen < IPv4Len || g.L3+hlen > len(g.Bytes) {
		return g
	}
	h := g.Bytes[g.L3 : g.L3+hlen]
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], Checksum(h))
	return g
}

// etherType returns the EtherType right before L3, or 0.
func (f Frame) etherType() uint16 {
	if f.L3 < 2 || f.L3 > len(f.Bytes) {
		return 0
	}
	return binary.BigEndian.Uint16(f.Bytes[f.L3-2:])
}

func (f Frame) mustIPv4(op string, need int) {
	if f.etherType() != EtherTypeIPv4 || f.L3+need > len(f.Bytes) {
		panic(fmt.Sprintf("frames: %s on a frame without an IPv4 header (L3 %d, length %d)", op, f.L3, len(f.Bytes)))
	}
}

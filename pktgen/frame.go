package pktgen

// The frame builder: what the generator sends (and what xdpdrop gen,
// demo and bench put on the wire) is built here. internal/frames wraps it
// with the constructors and damage helpers that only tests need.

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// EtherTypes and VLAN tag protocol identifiers.
const (
	EtherTypeIPv4 uint16 = 0x0800
	EtherTypeARP  uint16 = 0x0806
	EtherTypeIPv6 uint16 = 0x86dd
	EtherTypeLLDP uint16 = 0x88cc
	TPID8021Q     uint16 = 0x8100 // 802.1Q VLAN tag (C-tag)
	TPID8021AD    uint16 = 0x88a8 // 802.1ad service tag (S-tag, the outer QinQ tag)
)

// IP protocol numbers, as found in the IPv4 Protocol and IPv6 Next Header
// fields.
const (
	ProtoHopByHop uint8 = 0
	ProtoICMP     uint8 = 1
	ProtoTCP      uint8 = 6
	ProtoUDP      uint8 = 17
	ProtoRouting  uint8 = 43
	ProtoFragment uint8 = 44
	ProtoGRE      uint8 = 47
	ProtoESP      uint8 = 50
	ProtoAH       uint8 = 51
	ProtoICMPv6   uint8 = 58
	ProtoNoNext   uint8 = 59
	ProtoDestOpts uint8 = 60
	ProtoSCTP     uint8 = 132
)

// TCP flags for FrameSpec.TCPFlags.
const (
	TCPFin uint8 = 0x01
	TCPSyn uint8 = 0x02
	TCPRst uint8 = 0x04
	TCPPsh uint8 = 0x08
	TCPAck uint8 = 0x10
	TCPUrg uint8 = 0x20
	TCPEce uint8 = 0x40
	TCPCwr uint8 = 0x80
)

// Header lengths without options.
const (
	EthernetLen = 14
	VLANLen     = 4
	IPv4Len     = 20
	IPv6Len     = 40
	TCPLen      = 20
	UDPLen      = 8
	ICMPLen     = 8 // ICMP and ICMPv6: type, code, checksum and 4 bytes of rest
)

// Values Build writes into fields that FrameSpec does not expose.
const (
	TCPSeq    uint32 = 1     // sequence number of every TCP segment
	TCPWindow uint16 = 65535 // window of every TCP segment
	AHSPI     uint32 = 0x100 // SPI of an IPv6 authentication header; its sequence number is 1
)

// VLAN is one 802.1Q or 802.1ad tag.
type VLAN struct {
	TPID uint16 // TPID8021Q or TPID8021AD; 0 means TPID8021Q
	ID   uint16 // VLAN identifier, 12 bits
	PCP  uint8  // priority code point, 3 bits
	DEI  bool   // drop eligible indicator
}

// ExtHeader is one IPv6 extension header.
//
// Type ProtoFragment is written as an 8-byte fragment header from
// FragOffset, More and ID. Type ProtoAH is an authentication header of Len
// bytes (a multiple of 8, at least 16; 0 means 16) with SPI AHSPI, sequence
// number 1 and a zero ICV. Every other type, including ProtoHopByHop,
// ProtoRouting and ProtoDestOpts, is written in the generic format of RFC
// 8200 and RFC 6564: next header, length in 8-byte units not counting the
// first 8, then Len-2 bytes. For hop-by-hop and destination options those
// are one PadN option in an 8-byte header, and OptExperiment options
// followed by at most 7 bytes of padding in a longer one; for any other
// type they are zeros (a routing header of type 0 with no segments left,
// which a receiver skips).
type ExtHeader struct {
	Type       uint8
	Len        int    // total length in bytes: a multiple of 8, from 8 to 2048; 0 means 8; ignored for fragments
	FragOffset uint16 // fragment only: offset in 8-byte units, 13 bits
	More       bool   // fragment only: more fragments follow
	ID         uint32 // fragment only: identification
}

// FrameSpec describes a frame. Its zero value is a 14-byte Ethernet header
// with EtherType 0.
type FrameSpec struct {
	SrcMAC, DstMAC [6]byte // zero means 02:00:00:00:00:01 and 02:00:00:00:00:02
	VLANs          []VLAN  // outermost first

	// EtherType follows the VLAN tags in a frame without IP (Src and Dst
	// invalid), for example EtherTypeARP or EtherTypeLLDP, and Payload
	// follows it. It is ignored when there is an IP layer.
	EtherType uint16

	Src, Dst  netip.Addr // both IPv4 or both IPv6 (an IPv4-mapped address is IPv6); both invalid means no IP layer
	TTL       uint8      // IPv4 TTL or IPv6 hop limit; 0 means 64
	TOS       uint8      // IPv4 TOS or IPv6 traffic class
	FlowLabel uint32     // IPv6 flow label, 20 bits

	IPv4Options       []byte // padded with zeros (end of option list) to a multiple of 4, at most 40 bytes
	IPv4ID            uint16 // identification
	IPv4FragOffset    uint16 // in 8-byte units, 13 bits
	IPv4MoreFragments bool
	IPv4DontFragment  bool

	IPv6Ext []ExtHeader // in order after the IPv6 header; the next-header chain ends in Proto

	// Proto is the L4 protocol number: ProtoTCP, ProtoUDP, ProtoICMP and
	// ProtoICMPv6 get a header with a valid checksum; for any other value
	// Payload follows the IP headers directly. Proto is written as given,
	// so 0 after an IPv6 header means a hop-by-hop header (ProtoNoNext is
	// IPv6's "nothing follows").
	Proto uint8

	SrcPort, DstPort uint16 // TCP and UDP
	TCPFlags         uint8  // 0 means TCPSyn; the acknowledgment number is 1 when TCPAck is set, else 0
	TCPOptions       []byte // padded with zeros (end of option list) to a multiple of 4, at most 40 bytes

	ICMPType, ICMPCode uint8 // ICMP and ICMPv6; the 4 bytes after the checksum are zero

	Payload []byte // L4 payload, or what follows the IP headers or the EtherType
	PadTo   int    // zeros appended to make the frame at least this long (e.g. 60); not counted in any length field
}

// Frame is a built frame and the offsets of its layers in Bytes.
type Frame struct {
	Bytes []byte

	// L3 is the offset of the IP header, -1 without an IP layer.
	L3 int
	// L4 is the offset of the L4 header: right after the IP header and
	// its IPv6 extension headers, also for a protocol Build writes no
	// header for. It is -1 without an IP layer and in a fragment other
	// than the first, which carries no L4 header.
	L4 int
	// Payload is the offset of FrameSpec.Payload: after the L4 header, after
	// the IP headers for a raw protocol or a non-first fragment, or after
	// the EtherType without an IP layer.
	Payload int
}

// Build encodes s. Lengths and checksums are computed, with the pseudo
// header for TCP, UDP and ICMPv6. In a first fragment (offset 0, more
// fragments) the L4 header is written as if Payload were the whole
// datagram, so its length and checksum describe this fragment alone; a
// fragment at a non-zero offset has no L4 header, Payload follows the IP
// headers.
//
// Build panics if s cannot be encoded: Src and Dst of different families or
// only one of them valid, options longer than 40 bytes, an extension header
// length out of range, a fragment offset beyond 13 bits, or an IP packet
// longer than 65535 bytes.
func (s FrameSpec) Build() Frame {
	f := Frame{L3: -1, L4: -1, Payload: -1}
	b := make([]byte, 0, s.sizeHint())
	b = s.appendEthernet(b)

	switch {
	case !s.Src.IsValid() && !s.Dst.IsValid():
		b = binary.BigEndian.AppendUint16(b, s.EtherType)
		f.Payload = len(b)
		b = append(b, s.Payload...)
	case s.Src.Is4() && s.Dst.Is4():
		b = binary.BigEndian.AppendUint16(b, EtherTypeIPv4)
		f.L3 = len(b)
		b, f.L4, f.Payload = s.appendIPv4(b)
	case s.Src.Is6() && s.Dst.Is6():
		b = binary.BigEndian.AppendUint16(b, EtherTypeIPv6)
		f.L3 = len(b)
		b, f.L4, f.Payload = s.appendIPv6(b)
	default:
		panic(fmt.Sprintf("pktgen: source %v and destination %v are not both IPv4 or both IPv6", s.Src, s.Dst))
	}

	if n := s.PadTo - len(b); n > 0 {
		b = append(b, make([]byte, n)...)
	}
	f.Bytes = b
	return f
}

func (s FrameSpec) sizeHint() int {
	n := EthernetLen + VLANLen*len(s.VLANs) + IPv6Len + 8*len(s.IPv6Ext) +
		len(s.IPv4Options) + TCPLen + len(s.TCPOptions) + len(s.Payload) + 8
	for _, e := range s.IPv6Ext {
		n += e.Len
	}
	return max(n, s.PadTo)
}

func (s FrameSpec) appendEthernet(b []byte) []byte {
	dst, src := s.DstMAC, s.SrcMAC
	if dst == ([6]byte{}) {
		dst = [6]byte{0x02, 0, 0, 0, 0, 0x02}
	}
	if src == ([6]byte{}) {
		src = [6]byte{0x02, 0, 0, 0, 0, 0x01}
	}
	b = append(b, dst[:]...)
	b = append(b, src[:]...)
	for _, v := range s.VLANs {
		tpid := v.TPID
		if tpid == 0 {
			tpid = TPID8021Q
		}
		tci := uint16(v.PCP&0x7)<<13 | v.ID&0x0fff
		if v.DEI {
			tci |= 1 << 12
		}
		b = binary.BigEndian.AppendUint16(b, tpid)
		b = binary.BigEndian.AppendUint16(b, tci)
	}
	return b
}

func (s FrameSpec) ttl() uint8 {
	if s.TTL == 0 {
		return 64
	}
	return s.TTL
}

// appendIPv4 appends the IPv4 header and what follows it, and returns the
// offsets of the L4 header and the payload.
func (s FrameSpec) appendIPv4(b []byte) ([]byte, int, int) {
	if len(s.IPv4Options) > 40 {
		panic(fmt.Sprintf("pktgen: %d bytes of IPv4 options, at most 40 fit", len(s.IPv4Options)))
	}
	if s.IPv4FragOffset > 0x1fff {
		panic(fmt.Sprintf("pktgen: IPv4 fragment offset %d does not fit in 13 bits", s.IPv4FragOffset))
	}
	optLen := (len(s.IPv4Options) + 3) &^ 3
	hlen := IPv4Len + optLen
	nonFirst := s.IPv4FragOffset != 0
	seg, l4hdr := s.segment(nonFirst)
	total := hlen + len(seg)
	if total > 0xffff {
		panic(fmt.Sprintf("pktgen: IPv4 packet of %d bytes, at most 65535 fit", total))
	}

	frag := s.IPv4FragOffset
	if s.IPv4DontFragment {
		frag |= 0x4000
	}
	if s.IPv4MoreFragments {
		frag |= 0x2000
	}
	src, dst := s.Src.As4(), s.Dst.As4()

	l3 := len(b)
	b = append(b, 0x40|byte(hlen/4), s.TOS)
	b = binary.BigEndian.AppendUint16(b, uint16(total))
	b = binary.BigEndian.AppendUint16(b, s.IPv4ID)
	b = binary.BigEndian.AppendUint16(b, frag)
	b = append(b, s.ttl(), s.Proto, 0, 0)
	b = append(b, src[:]...)
	b = append(b, dst[:]...)
	b = append(b, s.IPv4Options...)
	b = append(b, make([]byte, optLen-len(s.IPv4Options))...)
	binary.BigEndian.PutUint16(b[l3+10:], Checksum(b[l3:]))

	if !nonFirst {
		pseudo := sum(src[:], 0)
		pseudo = sum(dst[:], pseudo)
		pseudo += uint64(s.Proto) + uint64(len(seg))
		s.fillChecksum(seg, pseudo)
	}
	return appendSegment(b, seg, l4hdr)
}

// appendIPv6 appends the IPv6 header, the extension headers and what
// follows them, and returns the offsets of the L4 header and the payload.
func (s FrameSpec) appendIPv6(b []byte) ([]byte, int, int) {
	ext, nonFirst := s.ipv6Ext()
	seg, l4hdr := s.segment(nonFirst)
	plen := len(ext) + len(seg)
	if plen > 0xffff {
		panic(fmt.Sprintf("pktgen: IPv6 payload of %d bytes, at most 65535 fit (no jumbograms)", plen))
	}
	next := s.Proto
	if len(s.IPv6Ext) > 0 {
		next = s.IPv6Ext[0].Type
	}
	src, dst := s.Src.As16(), s.Dst.As16()

	b = binary.BigEndian.AppendUint32(b, 6<<28|uint32(s.TOS)<<20|s.FlowLabel&0xfffff)
	b = binary.BigEndian.AppendUint16(b, uint16(plen))
	b = append(b, next, s.ttl())
	b = append(b, src[:]...)
	b = append(b, dst[:]...)
	b = append(b, ext...)

	if !nonFirst {
		pseudo := sum(src[:], 0)
		pseudo = sum(dst[:], pseudo)
		pseudo += uint64(s.Proto) + uint64(len(seg))
		s.fillChecksum(seg, pseudo)
	}
	return appendSegment(b, seg, l4hdr)
}

func appendSegment(b, seg []byte, l4hdr int) ([]byte, int, int) {
	l4 := len(b)
	b = append(b, seg...)
	if l4hdr < 0 {
		return b, -1, l4
	}
	return b, l4, l4 + l4hdr
}

// ipv6Ext encodes the extension headers and reports whether one of them
// is a fragment header with a non-zero offset.
func (s FrameSpec) ipv6Ext() ([]byte, bool) {
	var b []byte
	nonFirst := false
	for i, e := range s.IPv6Ext {
		next := s.Proto
		if i+1 < len(s.IPv6Ext) {
			next = s.IPv6Ext[i+1].Type
		}
		switch e.Type {
		case ProtoFragment:
			if e.FragOffset > 0x1fff {
				panic(fmt.Sprintf("pktgen: IPv6 fragment offset %d does not fit in 13 bits", e.FragOffset))
			}
			off := e.FragOffset << 3
			if e.More {
				off |= 1
			}
			b = append(b, next, 0)
			b = binary.BigEndian.AppendUint16(b, off)
			b = binary.BigEndian.AppendUint32(b, e.ID)
			nonFirst = nonFirst || e.FragOffset != 0
		case ProtoAH:
			n := e.Len
			if n == 0 {
				n = 16
			}
			if n < 16 || n%8 != 0 || n > 1024 {
				panic(fmt.Sprintf("pktgen: IPv6 authentication header of %d bytes, want a multiple of 8 from 16 to 1024", n))
			}
			b = append(b, next, byte(n/4-2), 0, 0)
			b = binary.BigEndian.AppendUint32(b, AHSPI)
			b = binary.BigEndian.AppendUint32(b, 1)
			b = append(b, make([]byte, n-12)...)
		default:
			n := e.Len
			if n == 0 {
				n = 8
			}
			if n < 8 || n%8 != 0 || n > 2048 {
				panic(fmt.Sprintf("pktgen: IPv6 extension header %d of %d bytes, want a multiple of 8 from 8 to 2048", e.Type, n))
			}
			b = append(b, next, byte(n/8-1))
			if e.Type == ProtoHopByHop || e.Type == ProtoDestOpts {
				b = appendOptions(b, n-2)
			} else {
				b = append(b, make([]byte, n-2)...)
			}
		}
	}
	return b, nonFirst
}

// OptExperiment is the option type that fills hop-by-hop and destination
// options headers longer than 8 bytes: an RFC 3692-style experiment (RFC
// 4727) whose two high bits tell a receiver that does not know it to skip
// it.
const OptExperiment uint8 = 0x1e

// appendOptions fills n bytes of an options header with options a
// receiver skips. Linux drops a header with more than 7 bytes of padding
// in a row (RFC 4942 section 2.1.9.5), so beyond 7 bytes the space goes to
// OptExperiment options, which it skips, up to 8 of them by default
// (sysctl net.ipv6.max_{hbh,dst}_opts_number): enough for 2048 bytes.
func appendOptions(b []byte, n int) []byte {
	for n > 7 {
		k := min(n-2, 255)
		b = append(b, OptExperiment, byte(k))
		b = append(b, make([]byte, k)...)
		n -= 2 + k
	}
	switch n {
	case 0:
	case 1:
		b = append(b, 0) // Pad1
	default:
		b = append(b, 1, byte(n-2)) // PadN
		b = append(b, make([]byte, n-2)...)
	}
	return b
}

// segment encodes what follows the IP headers with a zero checksum, and
// returns it with the length of its L4 header: 0 for a raw protocol, -1
// for a fragment other than the first, which has no L4 header.
func (s FrameSpec) segment(nonFirst bool) ([]byte, int) {
	if nonFirst {
		return append([]byte(nil), s.Payload...), -1
	}
	var h []byte
	switch s.Proto {
	case ProtoTCP:
		if len(s.TCPOptions) > 40 {
			panic(fmt.Sprintf("pktgen: %d bytes of TCP options, at most 40 fit", len(s.TCPOptions)))
		}
		optLen := (len(s.TCPOptions) + 3) &^ 3
		flags := s.TCPFlags
		if flags == 0 {
			flags = TCPSyn
		}
		var ack uint32
		if flags&TCPAck != 0 {
			ack = 1
		}
		h = make([]byte, 0, TCPLen+optLen+len(s.Payload))
		h = binary.BigEndian.AppendUint16(h, s.SrcPort)
		h = binary.BigEndian.AppendUint16(h, s.DstPort)
		h = binary.BigEndian.AppendUint32(h, TCPSeq)
		h = binary.BigEndian.AppendUint32(h, ack)
		h = append(h, byte((TCPLen+optLen)/4)<<4, flags)
		h = binary.BigEndian.AppendUint16(h, TCPWindow)
		h = append(h, 0, 0, 0, 0) // checksum, urgent pointer
		h = append(h, s.TCPOptions...)
		h = append(h, make([]byte, optLen-len(s.TCPOptions))...)
	case ProtoUDP:
		n := UDPLen + len(s.Payload)
		if n > 0xffff {
			panic(fmt.Sprintf("pktgen: UDP datagram of %d bytes, at most 65535 fit", n))
		}
		h = make([]byte, 0, n)
		h = binary.BigEndian.AppendUint16(h, s.SrcPort)
		h = binary.BigEndian.AppendUint16(h, s.DstPort)
		h = binary.BigEndian.AppendUint16(h, uint16(n))
		h = append(h, 0, 0)
	case ProtoICMP, ProtoICMPv6:
		h = make([]byte, 0, ICMPLen+len(s.Payload))
		h = append(h, s.ICMPType, s.ICMPCode, 0, 0, 0, 0, 0, 0)
	}
	hlen := len(h)
	return append(h, s.Payload...), hlen
}

// fillChecksum writes the L4 checksum of seg; pseudo is the sum of the
// pseudo header, which ICMP over IPv4 does not use.
func (s FrameSpec) fillChecksum(seg []byte, pseudo uint64) {
	switch s.Proto {
	case ProtoTCP:
		binary.BigEndian.PutUint16(seg[16:], fold(sum(seg, pseudo)))
	case ProtoUDP:
		c := fold(sum(seg, pseudo))
		if c == 0 {
			c = 0xffff // 0 would mean "no checksum"
		}
		binary.BigEndian.PutUint16(seg[6:], c)
	case ProtoICMP:
		binary.BigEndian.PutUint16(seg[2:], Checksum(seg))
	case ProtoICMPv6:
		binary.BigEndian.PutUint16(seg[2:], fold(sum(seg, pseudo)))
	}
}

// Checksum returns the Internet checksum of b (RFC 1071): the complement of
// the ones' complement sum of its 16-bit big-endian words, an odd last byte
// padded with zero. Over data that holds its own correct checksum it
// returns 0.
func Checksum(b []byte) uint16 {
	return fold(sum(b, 0))
}

func sum(b []byte, acc uint64) uint64 {
	for len(b) >= 2 {
		acc += uint64(b[0])<<8 | uint64(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return acc
}

func fold(acc uint64) uint16 {
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return ^uint16(acc)
}

// Pattern returns n bytes 0, 1, 2, ... (mod 256), a payload that is easy to
// recognise in a capture.
func Pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

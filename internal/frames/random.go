package frames

import (
	"math/rand/v2"
	"net/netip"
)

// Random returns a random Spec that Build encodes into a well-formed frame:
// 0 to 2 VLAN tags of either TPID; a non-IP ARP request or reply or LLDP
// frame one time in ten; otherwise IPv4 (options up to 40 bytes, first,
// middle and last fragments) or IPv6 (0 to 3 extension headers among
// hop-by-hop, routing, destination options and fragment, hop-by-hop only
// first and fragment at most once) carrying TCP, UDP, ICMP or ICMPv6 as
// fits the family, or GRE, ESP, SCTP, an experimental protocol or, on IPv6,
// no next header. A fragment that has more fragments after it carries a
// multiple of 8 bytes. The same rng state gives the same Spec.
func Random(rng *rand.Rand) Spec {
	var s Spec
	if rng.IntN(2) == 0 {
		s.SrcMAC, s.DstMAC = randomMAC(rng), randomMAC(rng)
	}
	for range rng.IntN(3) {
		s.VLANs = append(s.VLANs, VLAN{
			TPID: pick(rng, 0, TPID8021Q, TPID8021AD),
			ID:   uint16(rng.IntN(4096)),
			PCP:  uint8(rng.IntN(8)),
			DEI:  rng.IntN(8) == 0,
		})
	}
	if rng.IntN(4) == 0 {
		s.PadTo = pick(rng, 60, 64)
	}

	switch r := rng.IntN(20); {
	case r < 2:
		randomNonIP(rng, &s)
		return s
	case r < 11:
		randomIPv4(rng, &s)
	default:
		randomIPv6(rng, &s)
	}
	s.TTL = uint8(rng.IntN(256))
	s.TOS = uint8(rng.IntN(256))

	hlen := 0 // bytes of L4 header in a first fragment
	switch s.Proto {
	case ProtoTCP:
		s.SrcPort, s.DstPort = randomPort(rng), randomPort(rng)
		s.TCPFlags = pick(rng, TCPSyn, TCPSyn|TCPAck, TCPAck, TCPPsh|TCPAck, TCPFin|TCPAck, TCPRst, TCPRst|TCPAck)
		s.TCPOptions = pick(rng, nil,
			[]byte{2, 4, 0x05, 0xb4},                    // MSS 1460
			[]byte{2, 4, 0x05, 0xb4, 1, 3, 3, 7},        // MSS, NOP, window scale 7
			[]byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0}, // NOP, NOP, timestamps
			[]byte{2, 4, 0x05, 0x8c, 4, 2, 1, 3, 3, 7},  // MSS, SACK permitted, NOP, window scale (padded)
		)
		hlen = TCPLen + (len(s.TCPOptions)+3)&^3
	case ProtoUDP:
		s.SrcPort, s.DstPort = randomPort(rng), randomPort(rng)
		hlen = UDPLen
	case ProtoICMP:
		s.ICMPType = pick[uint8](rng, 0, 8, 8, 3, 11)
		if s.ICMPType == 3 {
			s.ICMPCode = uint8(rng.IntN(16))
		}
		hlen = ICMPLen
	case ProtoICMPv6:
		s.ICMPType = pick[uint8](rng, 128, 128, 129, 1, 2, 135, 136)
		hlen = ICMPLen
	}

	n := rng.IntN(65)
	if rng.IntN(10) == 0 {
		n = rng.IntN(1400)
	}
	if s.Proto == ProtoNoNext {
		n = 0
	}
	frag, first, more, ext := s.fragment()
	if !first {
		hlen = 0 // a later fragment has no L4 header
	}
	if frag && more {
		n += (8 - (ext+hlen+n)%8) % 8
	}
	s.Payload = make([]byte, n)
	for i := range s.Payload {
		s.Payload[i] = byte(rng.Uint32())
	}
	return s
}

// fragment reports whether s is a fragment, whether it is the first one,
// whether more fragments follow, and the length of the IPv6 extension
// headers after the fragment header, which belong to the fragment's data.
func (s Spec) fragment() (frag, first, more bool, ext int) {
	if s.Src.Is4() {
		return s.IPv4FragOffset != 0 || s.IPv4MoreFragments, s.IPv4FragOffset == 0, s.IPv4MoreFragments, 0
	}
	for i, e := range s.IPv6Ext {
		if e.Type == ProtoFragment {
			for _, after := range s.IPv6Ext[i+1:] {
				ext += after.Len // Random never leaves Len at 0 or adds a second fragment header
			}
			return true, e.FragOffset == 0, e.More, ext
		}
	}
	return false, true, false, 0
}

func randomNonIP(rng *rand.Rand, s *Spec) {
	s.SrcMAC = randomMAC(rng) // it appears in the payload too
	if rng.IntN(2) == 0 {
		s.EtherType = EtherTypeARP
		s.DstMAC = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		spa, tpa := randomAddr4(rng), randomAddr4(rng)
		if rng.IntN(2) == 0 {
			s.Payload = arpBody(1, s.SrcMAC, spa, [6]byte{}, tpa)
		} else {
			s.Payload = arpBody(2, s.SrcMAC, spa, randomMAC(rng), tpa)
		}
		return
	}
	s.EtherType = EtherTypeLLDP
	s.DstMAC = [6]byte{0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e} // nearest bridge
	mac := s.SrcMAC
	s.Payload = []byte{
		0x02, 0x07, 4, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5], // chassis ID: MAC address
		0x04, 0x05, 5, 'e', 't', 'h', '0', // port ID: interface name
		0x06, 0x02, 0x00, byte(rng.IntN(256)), // TTL in seconds
		0x00, 0x00, // end of LLDPDU
	}
}

func randomIPv4(rng *rand.Rand, s *Spec) {
	s.Src, s.Dst = randomAddr4(rng), randomAddr4(rng)
	s.IPv4ID = uint16(rng.Uint32())
	switch rng.IntN(4) {
	case 0:
		s.IPv4Options = []byte{1, 1, 1, 1} // NOPs
	case 1:
		s.IPv4Options = []byte{148, 4, 0, 0} // router alert
	case 2:
		k := 1 + rng.IntN(9) // record route with room for k addresses
		s.IPv4Options = make([]byte, 3+4*k)
		s.IPv4Options[0], s.IPv4Options[1], s.IPv4Options[2] = 7, byte(3+4*k), 4
	}
	switch rng.IntN(8) {
	case 0: // first fragment
		s.IPv4MoreFragments = true
	case 1: // middle fragment
		s.IPv4FragOffset = uint16(1 + rng.IntN(1000))
		s.IPv4MoreFragments = true
	case 2: // last fragment
		s.IPv4FragOffset = uint16(1 + rng.IntN(1000))
	default:
		s.IPv4DontFragment = rng.IntN(2) == 0
	}
	s.Proto = pick(rng, ProtoTCP, ProtoTCP, ProtoUDP, ProtoUDP, ProtoICMP,
		ProtoGRE, ProtoESP, ProtoSCTP, 253)
}

func randomIPv6(rng *rand.Rand, s *Spec) {
	s.Src, s.Dst = randomAddr6(rng), randomAddr6(rng)
	s.FlowLabel = rng.Uint32() & 0xfffff
	fragment := false
	for i := range rng.IntN(4) {
		var e ExtHeader
		if i == 0 && rng.IntN(3) == 0 {
			e.Type = ProtoHopByHop
		} else {
			e.Type = pick(rng, ProtoRouting, ProtoDestOpts, ProtoFragment)
		}
		if e.Type == ProtoFragment && fragment {
			e.Type = ProtoDestOpts
		}
		if e.Type == ProtoFragment {
			fragment = true
			e.ID = rng.Uint32()
			switch rng.IntN(4) {
			case 0: // first fragment
				e.More = true
			case 1: // middle fragment
				e.FragOffset, e.More = uint16(1+rng.IntN(1000)), true
			case 2: // last fragment
				e.FragOffset = uint16(1 + rng.IntN(1000))
			} // else an atomic fragment (RFC 6946)
		} else {
			e.Len = 8 * (1 + rng.IntN(4))
		}
		s.IPv6Ext = append(s.IPv6Ext, e)
	}
	s.Proto = pick(rng, ProtoTCP, ProtoTCP, ProtoUDP, ProtoUDP, ProtoICMPv6,
		ProtoGRE, ProtoESP, ProtoSCTP, ProtoNoNext, 253)
}

func randomMAC(rng *rand.Rand) [6]byte {
	var m [6]byte
	for i := range m {
		m[i] = byte(rng.Uint32())
	}
	m[0] = m[0]&^0x01 | 0x02 // unicast, locally administered
	return m
}

func randomAddr4(rng *rand.Rand) netip.Addr {
	var a [4]byte
	for i := range a {
		a[i] = byte(rng.Uint32())
	}
	return netip.AddrFrom4(a)
}

func randomAddr6(rng *rand.Rand) netip.Addr {
	var a [16]byte
	for i := range a {
		a[i] = byte(rng.Uint32())
	}
	if rng.IntN(2) == 0 {
		a[0], a[1], a[2], a[3] = 0x20, 0x01, 0x0d, 0xb8 // documentation prefix
	}
	return netip.AddrFrom16(a)
}

func randomPort(rng *rand.Rand) uint16 {
	if rng.IntN(2) == 0 {
		return pick[uint16](rng, 53, 80, 123, 443, 11211)
	}
	return uint16(rng.Uint32())
}

func pick[T any](rng *rand.Rand, choices ...T) T {
	return choices[rng.IntN(len(choices))]
}

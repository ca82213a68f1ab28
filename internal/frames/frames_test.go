package frames_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/internal/frames"
)

var (
	ip4a = netip.MustParseAddr("192.0.2.1")
	ip4b = netip.MustParseAddr("198.51.100.2")
	ip6a = netip.MustParseAddr("2001:db8::1")
	ip6b = netip.MustParseAddr("2001:db8::2")
)

// The checksums in the hand-written frames below come from a separate
// Python script (struct.pack and a textbook RFC 1071 sum), not from this
// package.

func TestUDP4Bytes(t *testing.T) {
	f := frames.UDP4("192.0.2.1", "198.51.100.2", 1234, 53, 4)
	want := hexBytes(`
		02 00 00 00 00 02  02 00 00 00 00 01  08 00
		45 00 00 20  00 00 00 00  40 11 8e 96  c0 00 02 01  c6 33 64 02
		04 d2 00 35  00 0c 0c 94
		00 01 02 03`)
	assert.Equal(t, want, f.Bytes, "UDP4")
	assert.EqualValues(t, 14, f.L3, "L3")
	assert.EqualValues(t, 34, f.L4, "L4")
	assert.EqualValues(t, 42, f.Payload, "Payload")
	assert.EqualValues(t, 46, f.Len(), "Len")
}

func TestUDP6Bytes(t *testing.T) {
	f := frames.UDP6("2001:db8::1", "2001:db8::2", 1234, 53, 5)
	want := hexBytes(`
		02 00 00 00 00 02  02 00 00 00 00 01  86 dd
		60 00 00 00  00 0d 11 40
		20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 01
		20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 02
		04 d2 00 35  00 0d 99 54
		00 01 02 03 04`)
	assert.Equal(t, want, f.Bytes, "UDP6")
	assert.EqualValues(t, 14, f.L3, "L3")
	assert.EqualValues(t, 54, f.L4, "L4")
	assert.EqualValues(t, 62, f.Payload, "Payload")
}

func TestTCP4Bytes(t *testing.T) {
	f := frames.TCP4("10.0.0.1", "10.0.0.2", 40000, 80, 0)
	want := hexBytes(`
		02 00 00 00 00 02  02 00 00 00 00 01  08 00
		45 00 00 28  00 00 00 00  40 06 66 ce  0a 00 00 01  0a 00 00 02
		9c 40 00 50  00 00 00 01  00 00 00 00  50 02 ff ff  ff 4e 00 00`)
	assert.Equal(t, want, f.Bytes, "TCP4")
	assert.EqualValues(t, 34, f.L4, "L4")
	assert.EqualValues(t, 54, f.Payload, "Payload")
	assert.EqualValues(t, f.Len(), f.Payload, "Payload at end")
}

func TestTCP6(t *testing.T) {
	f := frames.TCP6("2001:db8::1", "2001:db8::2", 1, 2, 3)
	mustVerify(t, frames.Spec{Src: ip6a, Dst: ip6b, Proto: 6, SrcPort: 1, DstPort: 2, Payload: []byte{0, 1, 2}}, f)
	assert.EqualValues(t, 54, f.L4, "L4")
	assert.EqualValues(t, frames.TCPSyn, f.Bytes[f.L4+13], "flags")
}

func TestICMPBytes(t *testing.T) {
	f := frames.Spec{
		Src: netip.MustParseAddr("10.1.1.1"), Dst: netip.MustParseAddr("10.1.1.2"),
		Proto: frames.ProtoICMP, ICMPType: 8, Payload: []byte("ping"),
	}.Build()
	assert.Equal(t, hexBytes(`
		45 00 00 20  00 00 00 00  40 01 64 d9  0a 01 01 01  0a 01 01 02
		08 00 19 2f  00 00 00 00  70 69 6e 67`), f.Bytes[14:], "ICMP echo")
	assert.EqualValues(t, 42, f.Payload, "Payload")

	f = frames.Spec{
		Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("ff02::1"),
		Proto: frames.ProtoICMPv6, ICMPType: 128, Payload: []byte("ping"),
	}.Build()
	assert.Equal(t, hexBytes(`80 00 a3 62  00 00 00 00  70 69 6e 67`), f.Bytes[f.L4:], "ICMPv6 echo")
	assert.EqualValues(t, 12, binary.BigEndian.Uint16(f.Bytes[18:]), "payload length")
	assert.EqualValues(t, 58, f.Bytes[20], "next header")
}

// TestIPv4HeaderChecksumKnown builds the IPv4 header of the worked example
// of the Wikipedia article "Internet checksum" (checksum 0xb861).
func TestIPv4HeaderChecksumKnown(t *testing.T) {
	f := frames.Spec{
		Src:              netip.MustParseAddr("192.168.0.1"),
		Dst:              netip.MustParseAddr("192.168.0.199"),
		IPv4DontFragment: true,
		Proto:            frames.ProtoUDP,
		Payload:          make([]byte, 0x73-28),
	}.Build()
	assert.Equal(t, hexBytes(`
		45 00 00 73 00 00 40 00 40 11 b8 61 c0 a8 00 01 c0 a8 00 c7`), f.Bytes[f.L3:f.L4], "IPv4 header")
}

func TestChecksum(t *testing.T) {
	// RFC 1071 section 3: the sum of 00 01 f2 03 f4 f5 f6 f7 is ddf2.
	assert.EqualValues(t, ^uint16(0xddf2), frames.Checksum(hexBytes("00 01 f2 03 f4 f5 f6 f7")), "RFC 1071 example")
	assert.EqualValues(t, ^uint16(0x0100), frames.Checksum([]byte{0x01}), "odd length")
	assert.EqualValues(t, 0xffff, frames.Checksum(nil), "empty")
	f := frames.UDP4("10.0.0.1", "10.0.0.2", 1, 2, 3)
	assert.EqualValues(t, 0, frames.Checksum(f.Bytes[f.L3:f.L4]), "over a valid header")
}

func TestUDPChecksumNeverZero(t *testing.T) {
	// Search for a payload whose UDP checksum computes to 0, which must be
	// sent as 0xffff since 0 means "no checksum".
	for i := range 1 << 16 {
		s := frames.Spec{Src: ip4a, Dst: ip4b, Proto: 17, SrcPort: 1, DstPort: 2, Payload: binary.BigEndian.AppendUint16(nil, uint16(i))}
		f := s.Build()
		if binary.BigEndian.Uint16(f.Bytes[f.L4+6:]) == 0xffff {
			mustVerify(t, s, f)
			return
		}
	}
	require.Fail(t, "no payload gave a checksum of 0xffff")
}

func TestDefaultsAndMACs(t *testing.T) {
	f := frames.Spec{Src: ip4a, Dst: ip4b, Proto: 17}.Build()
	assert.EqualValues(t, 64, f.Bytes[f.L3+8], "TTL")
	s := frames.Spec{
		SrcMAC: [6]byte{0xaa, 1, 2, 3, 4, 5}, DstMAC: [6]byte{0xbb, 1, 2, 3, 4, 5},
		Src: ip6a, Dst: ip6b, TTL: 7, TOS: 0xb8, FlowLabel: 0x12345, Proto: 17,
	}
	f = s.Build()
	assert.Equal(t, hexBytes("bb 01 02 03 04 05 aa 01 02 03 04 05"), f.Bytes[:12], "MACs")
	assert.Equal(t, hexBytes("6b 81 23 45"), f.Bytes[14:18], "version, class, flow")
	assert.EqualValues(t, 7, f.Bytes[21], "hop limit")
	mustVerify(t, s, f)

	f = frames.Spec{}.Build()
	assert.Equal(t, hexBytes("02 00 00 00 00 02  02 00 00 00 00 01  00 00"), f.Bytes, "zero Spec")
	assert.EqualValues(t, [3]int{-1, -1, 14}, [3]int{f.L3, f.L4, f.Payload}, "zero Spec offsets")
}

func TestVLANs(t *testing.T) {
	s := frames.Spec{
		VLANs: []frames.VLAN{
			{TPID: frames.TPID8021AD, ID: 100, PCP: 3},
			{ID: 200, PCP: 5, DEI: true},
		},
		Src: ip4a, Dst: ip4b, Proto: 17, SrcPort: 1, DstPort: 2,
	}
	f := s.Build()
	assert.Equal(t, hexBytes("88 a8 60 64  81 00 b0 c8  08 00"), f.Bytes[12:22], "QinQ tags")
	assert.EqualValues(t, 22, f.L3, "L3")
	assert.EqualValues(t, 42, f.L4, "L4")
	mustVerify(t, s, f)

	one := frames.Spec{VLANs: []frames.VLAN{{TPID: frames.TPID8021Q, ID: 0xfff, PCP: 7}}, Src: ip6a, Dst: ip6b, Proto: 59}.Build()
	assert.Equal(t, hexBytes("81 00 ef ff  86 dd"), one.Bytes[12:18], "one tag")
	assert.EqualValues(t, 18, one.L3, "L3")
}

func TestIPv4Options(t *testing.T) {
	for _, tc := range []struct {
		opts []byte
		ihl  byte
	}{
		{nil, 5},
		{[]byte{148, 4, 0, 0}, 6},         // router alert
		{[]byte{1, 1, 1, 1, 1}, 7},        // padded to 8
		{bytes.Repeat([]byte{1}, 40), 15}, // the most that fits
		{[]byte{7, 7, 4, 0, 0, 0, 0}, 7},  // record route, one slot
	} {
		t.Run(fmt.Sprint(len(tc.opts)), func(t *testing.T) {
			s := frames.Spec{Src: ip4a, Dst: ip4b, IPv4Options: tc.opts, Proto: 17, SrcPort: 7, DstPort: 9, Payload: []byte("x")}
			f := s.Build()
			assert.EqualValues(t, 0x40|tc.ihl, f.Bytes[f.L3], "version/IHL")
			assert.EqualValues(t, f.L3+int(tc.ihl)*4, f.L4, "L4")
			assert.EqualValues(t, int(tc.ihl)*4+9, int(binary.BigEndian.Uint16(f.Bytes[f.L3+2:])), "total length")
			padded := append(append([]byte{}, tc.opts...), make([]byte, int(tc.ihl-5)*4-len(tc.opts))...)
			assert.Equal(t, padded, f.Bytes[f.L3+20:f.L4], "options")
			assert.EqualValues(t, 7, binary.BigEndian.Uint16(f.Bytes[f.L4:]), "UDP source port")
			mustVerify(t, s, f)
		})
	}
}

func TestIPv4Fragments(t *testing.T) {
	base := frames.Spec{Src: ip4a, Dst: ip4b, IPv4ID: 0xbeef, Proto: 17, SrcPort: 1, DstPort: 2, Payload: frames.Pattern(16)}

	first := base
	first.IPv4MoreFragments = true
	f := first.Build()
	assert.Equal(t, hexBytes("be ef 20 00"), f.Bytes[f.L3+4:f.L3+8], "first: ID, flags, offset")
	assert.EqualValues(t, f.L3+20, f.L4, "first: L4")
	assert.EqualValues(t, f.L4+8, f.Payload, "first: payload")
	mustVerify(t, first, f)

	middle := base
	middle.IPv4MoreFragments, middle.IPv4FragOffset = true, 185
	f = middle.Build()
	assert.Equal(t, hexBytes("20 b9"), f.Bytes[f.L3+6:f.L3+8], "middle: flags, offset")
	assert.EqualValues(t, -1, f.L4, "middle: L4")
	assert.EqualValues(t, f.L3+20, f.Payload, "middle: payload")
	assert.Equal(t, base.Payload, f.Bytes[f.Payload:], "middle: raw payload")
	assert.EqualValues(t, 36, binary.BigEndian.Uint16(f.Bytes[f.L3+2:]), "middle: total length")
	mustVerify(t, middle, f)

	last := base
	last.IPv4FragOffset = 0x1fff
	f = last.Build()
	assert.Equal(t, hexBytes("1f ff"), f.Bytes[f.L3+6:f.L3+8], "last: flags, offset")
	mustVerify(t, last, f)

	df := base
	df.IPv4DontFragment = true
	f = df.Build()
	assert.Equal(t, hexBytes("40 00"), f.Bytes[f.L3+6:f.L3+8], "DF: flags, offset")
	mustVerify(t, df, f)
}

func TestIPv6ExtensionHeaders(t *testing.T) {
	s := frames.Spec{
		Src: ip6a, Dst: ip6b,
		IPv6Ext: []frames.ExtHeader{
			{Type: frames.ProtoHopByHop}, // Len 0 means 8
			{Type: frames.ProtoRouting, Len: 16},
			{Type: frames.ProtoFragment, More: true, ID: 0xdeadbeef, Len: 999}, // Len is ignored
			{Type: frames.ProtoDestOpts, Len: 24},
		},
		Proto: 17, SrcPort: 1, DstPort: 2, Payload: []byte("abc"),
	}
	f := s.Build()
	l3 := f.L3
	assert.EqualValues(t, 0, f.Bytes[l3+6], "first next header")
	assert.EqualValues(t, 8+16+8+24+8+3, int(binary.BigEndian.Uint16(f.Bytes[l3+4:])), "payload length")
	x := f.Bytes[l3+40:]
	assert.Equal(t, hexBytes("2b 00 01 04 00 00 00 00"), x[0:8], "hop-by-hop")
	assert.Equal(t, hexBytes("2c 01 00 00 00 00 00 00  00 00 00 00 00 00 00 00"), x[8:24], "routing")
	assert.Equal(t, hexBytes("3c 00 00 01 de ad be ef"), x[24:32], "fragment")
	assert.Equal(t, append(hexBytes("11 02 1e 14"), make([]byte, 20)...), x[32:56], "destination options")
	assert.EqualValues(t, l3+40+56, f.L4, "L4")
	assert.EqualValues(t, f.L4+8, f.Payload, "Payload")
	mustVerify(t, s, f)

	// A later fragment: no L4 header, and the fragment offset in place.
	s.IPv6Ext[2].FragOffset = 100
	f = s.Build()
	assert.Equal(t, hexBytes("3c 00 03 21 de ad be ef"), f.Bytes[l3+64:l3+72], "fragment")
	assert.EqualValues(t, -1, f.L4, "L4")
	assert.EqualValues(t, l3+40+56, f.Payload, "Payload")
	assert.Equal(t, []byte("abc"), f.Bytes[f.Payload:], "raw payload")
	mustVerify(t, s, f)

	// Authentication header and a generic type (mobility, 135).
	s = frames.Spec{
		Src: ip6a, Dst: ip6b,
		IPv6Ext: []frames.ExtHeader{{Type: frames.ProtoAH, Len: 24}, {Type: 135, Len: 8}},
		Proto:   frames.ProtoNoNext,
	}
	f = s.Build()
	assert.Equal(t, hexBytes(`
		87 04 00 00  00 00 01 00  00 00 00 01  00 00 00 00  00 00 00 00  00 00 00 00
		3b 00 00 00  00 00 00 00`), f.Bytes[f.L3+40:], "AH and mobility")
	assert.EqualValues(t, f.Len(), f.L4, "L4 at the end")
	mustVerify(t, s, f)
}

func TestIPv6OptionsHeaderLengths(t *testing.T) {
	for n := 8; n <= 2048; n += 8 {
		for _, typ := range []uint8{frames.ProtoHopByHop, frames.ProtoDestOpts} {
			s := frames.Spec{Src: ip6a, Dst: ip6b, IPv6Ext: []frames.ExtHeader{{Type: typ, Len: n}}, Proto: 17}
			f := s.Build()
			assert.EqualValues(t, f.L3+40+n, f.L4, fmt.Sprintf("L4 after a %d-byte header", n))
			mustVerify(t, s, f)
		}
	}
}

func TestRawProtocol(t *testing.T) {
	s := frames.Spec{Src: ip4a, Dst: ip4b, Proto: frames.ProtoGRE, Payload: []byte{0, 0, 0x08, 0x00}}
	f := s.Build()
	assert.EqualValues(t, 34, f.L4, "L4")
	assert.EqualValues(t, 34, f.Payload, "Payload")
	assert.EqualValues(t, 24, binary.BigEndian.Uint16(f.Bytes[16:]), "total length")
	mustVerify(t, s, f)
}

func TestTCPOptionsAndFlags(t *testing.T) {
	s := frames.Spec{
		Src: ip6a, Dst: ip6b, Proto: 6, SrcPort: 443, DstPort: 50000,
		TCPFlags:   frames.TCPPsh | frames.TCPAck,
		TCPOptions: []byte{2, 4, 0x05, 0xb4, 1, 3, 3}, // MSS, NOP, window scale without its shift: padded
		Payload:    []byte("hello"),
	}
	f := s.Build()
	tcp := f.Bytes[f.L4:]
	assert.EqualValues(t, 0x70, tcp[12], "data offset")
	assert.EqualValues(t, 0x18, tcp[13], "flags")
	assert.EqualValues(t, 1, binary.BigEndian.Uint32(tcp[8:]), "ack")
	assert.Equal(t, hexBytes("02 04 05 b4 01 03 03 00"), tcp[20:28], "options")
	assert.EqualValues(t, f.L4+28, f.Payload, "Payload")
	mustVerify(t, s, f)
}

func TestNonIP(t *testing.T) {
	f := frames.ARPRequest("192.0.2.1", "192.0.2.2")
	assert.Equal(t, hexBytes(`
		ff ff ff ff ff ff  02 00 00 00 00 01  08 06
		00 01 08 00 06 04 00 01  02 00 00 00 00 01 c0 00 02 01  00 00 00 00 00 00 c0 00 02 02`), f.Bytes, "ARP request")
	assert.EqualValues(t, [3]int{-1, -1, 14}, [3]int{f.L3, f.L4, f.Payload}, "offsets")

	s := frames.Spec{
		VLANs:     []frames.VLAN{{ID: 5}},
		EtherType: frames.EtherTypeLLDP,
		Payload:   []byte{0, 0},
		PadTo:     60,
	}
	f = s.Build()
	assert.Equal(t, hexBytes("81 00 00 05  88 cc  00 00  00 00"), f.Bytes[12:22], "LLDP")
	assert.EqualValues(t, 18, f.Payload, "Payload")
	mustVerify(t, s, f)
}

func TestPadTo(t *testing.T) {
	s := frames.Spec{Src: ip4a, Dst: ip4b, Proto: 17, PadTo: 60}
	f := s.Build()
	assert.EqualValues(t, 60, f.Len(), "length")
	assert.EqualValues(t, 28, binary.BigEndian.Uint16(f.Bytes[16:]), "total length")
	assert.Equal(t, make([]byte, 18), f.Bytes[42:], "padding")
	mustVerify(t, s, f)

	s.PadTo = 10 // shorter than the frame: nothing to do
	assert.EqualValues(t, 42, s.Build().Len(), "length")
}

func TestBuildPanics(t *testing.T) {
	for name, s := range map[string]frames.Spec{
		"mixed families":      {Src: ip4a, Dst: ip6b},
		"only Src":            {Src: ip4a},
		"only Dst":            {Dst: ip6b},
		"41 bytes of options": {Src: ip4a, Dst: ip4b, IPv4Options: make([]byte, 41)},
		"IPv4 fragment 8192":  {Src: ip4a, Dst: ip4b, IPv4FragOffset: 0x2000},
		"IPv4 too long":       {Src: ip4a, Dst: ip4b, Proto: 47, Payload: make([]byte, 65516)},
		"UDP too long":        {Src: ip6a, Dst: ip6b, Proto: 17, Payload: make([]byte, 65528)},
		"IPv6 too long":       {Src: ip6a, Dst: ip6b, Proto: 59, Payload: make([]byte, 65536)},
		"ext length 12":       {Src: ip6a, Dst: ip6b, IPv6Ext: []frames.ExtHeader{{Type: 60, Len: 12}}},
		"ext length 2056":     {Src: ip6a, Dst: ip6b, IPv6Ext: []frames.ExtHeader{{Type: 0, Len: 2056}}},
		"AH length 8":         {Src: ip6a, Dst: ip6b, IPv6Ext: []frames.ExtHeader{{Type: 51, Len: 8}}},
		"IPv6 fragment 8192":  {Src: ip6a, Dst: ip6b, IPv6Ext: []frames.ExtHeader{{Type: 44, FragOffset: 0x2000}}},
		"41 bytes of TCP opt": {Src: ip6a, Dst: ip6b, Proto: 6, TCPOptions: make([]byte, 41)},
	} {
		assert.Panics(t, func() { s.Build() }, name)
	}
	// The largest that fit.
	frames.Spec{Src: ip4a, Dst: ip4b, Proto: 47, Payload: make([]byte, 65515)}.Build()
	frames.Spec{Src: ip6a, Dst: ip6b, Proto: 59, Payload: make([]byte, 65535)}.Build()
	frames.Spec{Src: ip6a, Dst: ip6b, IPv6Ext: []frames.ExtHeader{{Type: 0, Len: 2048}, {Type: 51, Len: 1024}}}.Build()

	assert.Panics(t, func() { frames.UDP4("300.0.0.1", "10.0.0.1", 1, 2, 0) }, "UDP4 with a bad literal")
	assert.Panics(t, func() { frames.UDP4("::1", "::2", 1, 2, 0) }, "UDP4 with IPv6")
	assert.Panics(t, func() { frames.TCP6("10.0.0.1", "10.0.0.2", 1, 2, 0) }, "TCP6 with IPv4")
	assert.Panics(t, func() { frames.ARPRequest("::1", "::2") }, "ARPRequest with IPv6")
}

func TestTruncateAndClone(t *testing.T) {
	f := frames.UDP4("10.0.0.1", "10.0.0.2", 1, 2, 8)
	orig := append([]byte{}, f.Bytes...)

	tr := f.Truncate(f.L4 + 3)
	assert.EqualValues(t, f.L4+3, tr.Len(), "truncated length")
	assert.EqualValues(t, [3]int{f.L3, f.L4, f.Payload}, [3]int{tr.L3, tr.L4, tr.Payload}, "offsets kept")
	assert.Equal(t, orig[:f.L4+3], tr.Bytes, "truncated bytes")
	assert.EqualValues(t, f.Len(), f.Truncate(1000).Len(), "Truncate past the end")
	assert.EqualValues(t, 0, f.Truncate(-1).Len(), "Truncate below 0")

	at := f.TruncateAt(f.L4, 4)
	assert.Equal(t, orig[:f.L4+4], at, "TruncateAt(L4, 4)")
	assert.EqualValues(t, f.L3-1, len(f.TruncateAt(f.L3, -1)), "TruncateAt(L3, -1)")
	assert.Panics(t, func() { frames.ARPRequest("10.0.0.1", "10.0.0.2").TruncateAt(-1, 0) }, "TruncateAt on an absent layer")

	c := f.Clone()
	c.Bytes[0] = 0xff
	tr.Bytes[1] = 0xff
	at[2] = 0xff
	f.SetByte(3, 0xff)
	f.SetUint16(4, 0xffff)
	assert.Equal(t, orig, f.Bytes, "original after writes to copies")

	s := f.SetByte(f.L3+8, 1)
	assert.EqualValues(t, 1, s.Bytes[f.L3+8], "SetByte")
	assert.EqualValues(t, binary.BigEndian.Uint16(f.Bytes[f.L3+10:]), binary.BigEndian.Uint16(s.Bytes[f.L3+10:]), "SetByte leaves the checksum")
	assert.EqualValues(t, 0, frames.Checksum(s.FixIPv4Checksum().Bytes[s.L3:s.L4]), "FixIPv4Checksum")
	assert.EqualValues(t, 0xabcd, binary.BigEndian.Uint16(f.SetUint16(f.L4, 0xabcd).Bytes[f.L4:]), "SetUint16")
}

func TestCorrupt(t *testing.T) {
	f := frames.Spec{Src: ip4a, Dst: ip4b, IPv4Options: []byte{1, 1, 1, 1}, Proto: 17, Payload: frames.Pattern(40)}.Build()
	orig := append([]byte{}, f.Bytes...)
	headerOK := func(t *testing.T, g frames.Frame, hlen int) {
		t.Helper()
		assert.EqualValues(t, 0, frames.Checksum(g.Bytes[g.L3:g.L3+hlen]), "header checksum")
	}
	// changed checks that g differs from f at most at offs and in the
	// header checksum.
	changed := func(t *testing.T, g frames.Frame, offs ...int) {
		t.Helper()
		want := append([]byte{}, orig...)
		for _, i := range append(offs, f.L3+10, f.L3+11) {
			want[i] = g.Bytes[i]
		}
		assert.Equal(t, want, g.Bytes, "only bytes %v and the checksum change", offs)
	}

	for _, ihl := range []uint8{0, 4, 5, 7, 15} {
		g := f.CorruptIPv4IHL(ihl)
		assert.EqualValues(t, 0x40|ihl, g.Bytes[g.L3], "IHL")
		changed(t, g, g.L3)
		if ihl >= 5 {
			headerOK(t, g, int(ihl)*4)
		}
	}
	g := f.CorruptIPv4IHL(0x1f) // only 4 bits
	assert.EqualValues(t, 0x4f, g.Bytes[g.L3], "IHL from 0x1f")

	g = f.CorruptIPv4TotalLen(1000)
	assert.EqualValues(t, 1000, binary.BigEndian.Uint16(g.Bytes[g.L3+2:]), "total length")
	changed(t, g, g.L3+2, g.L3+3)
	headerOK(t, g, 24)

	g = f.CorruptIPVersion(6)
	assert.EqualValues(t, 0x66, g.Bytes[g.L3], "version")
	changed(t, g, g.L3)
	headerOK(t, g, 24)

	// IHL past the end of a short frame: the checksum stays as it was.
	short := f.Truncate(f.L3 + 24)
	g = short.CorruptIPv4IHL(15)
	assert.Equal(t, orig[f.L3+10:f.L3+12], g.Bytes[g.L3+10:g.L3+12], "checksum of a header past the end")

	v6 := frames.UDP6("::1", "::2", 1, 2, 0)
	g = v6.CorruptIPVersion(4)
	assert.EqualValues(t, 0x40, g.Bytes[g.L3], "IPv6 version")
	assert.Equal(t, v6.Bytes[v6.L3+1:], g.Bytes[g.L3+1:], "rest of IPv6")
	assert.Panics(t, func() { v6.CorruptIPv4IHL(5) }, "CorruptIPv4IHL on IPv6")
	assert.Panics(t, func() { frames.ARPRequest("10.0.0.1", "10.0.0.2").CorruptIPv4TotalLen(5) }, "CorruptIPv4TotalLen on ARP")
	assert.Panics(t, func() { frames.ARPRequest("10.0.0.1", "10.0.0.2").CorruptIPVersion(4) }, "CorruptIPVersion on ARP")
	assert.Panics(t, func() { f.Truncate(f.L3 + 2).CorruptIPv4TotalLen(5) }, "CorruptIPv4TotalLen cut at L3+2")

	assert.Equal(t, orig, f.Bytes, "original")
}

// TestRandom builds many random Specs, checks each frame with the test's
// own parser, and checks that every variant the doc promises shows up.
func TestRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]int{}
	for range 20000 {
		s := frames.Random(rng)
		f := s.Build()
		mustVerify(t, s, f)

		seen[fmt.Sprintf("vlans=%d", len(s.VLANs))]++
		for _, v := range s.VLANs {
			seen[fmt.Sprintf("tpid=%#x", v.TPID)]++
		}
		switch {
		case !s.Src.IsValid():
			seen[fmt.Sprintf("ethertype=%#x", s.EtherType)]++
			continue
		case s.Src.Is4():
			seen[fmt.Sprintf("ipv4 options=%v", len(s.IPv4Options) > 0)]++
			seen[fmt.Sprintf("ipv4 frag offset=%v more=%v", s.IPv4FragOffset > 0, s.IPv4MoreFragments)]++
			seen[fmt.Sprintf("ipv4 proto=%d", s.Proto)]++
			if s.IPv4MoreFragments {
				n := int(binary.BigEndian.Uint16(f.Bytes[f.L3+2:])) - int(f.Bytes[f.L3]&0xf)*4
				assert.Zero(t, n%8, "IPv4 fragment with more to come carries %d bytes", n)
			}
		default:
			seen[fmt.Sprintf("ipv6 ext=%d", len(s.IPv6Ext))]++
			seen[fmt.Sprintf("ipv6 proto=%d", s.Proto)]++
			for i, e := range s.IPv6Ext {
				seen[fmt.Sprintf("ipv6 ext type=%d", e.Type)]++
				if e.Type == 0 {
					assert.Zero(t, i, "position of the hop-by-hop header")
				}
				if e.Type == 44 {
					seen[fmt.Sprintf("ipv6 frag offset=%v more=%v", e.FragOffset > 0, e.More)]++
					if e.More {
						after := 40 + 8 // IPv6 and fragment headers
						for _, e := range s.IPv6Ext[:i] {
							after += e.Len
						}
						n := int(binary.BigEndian.Uint16(f.Bytes[f.L3+4:])) + 40 - after
						assert.Zero(t, n%8, "IPv6 fragment with more to come carries %d bytes", n)
					}
				}
			}
		}
		if f.L4 >= 0 && len(s.Payload) > 0 {
			seen["payload"]++
		}
		if s.PadTo > 0 {
			seen["padded"]++
		}
	}
	for _, k := range []string{
		"vlans=0", "vlans=1", "vlans=2", "tpid=0x0", "tpid=0x8100", "tpid=0x88a8",
		"ethertype=0x806", "ethertype=0x88cc",
		"ipv4 options=true", "ipv4 options=false",
		"ipv4 frag offset=false more=false", "ipv4 frag offset=false more=true",
		"ipv4 frag offset=true more=true", "ipv4 frag offset=true more=false",
		"ipv4 proto=6", "ipv4 proto=17", "ipv4 proto=1", "ipv4 proto=47",
		"ipv6 ext=0", "ipv6 ext=1", "ipv6 ext=2", "ipv6 ext=3",
		"ipv6 ext type=0", "ipv6 ext type=43", "ipv6 ext type=44", "ipv6 ext type=60",
		"ipv6 frag offset=false more=true", "ipv6 frag offset=true more=true",
		"ipv6 frag offset=true more=false", "ipv6 frag offset=false more=false",
		"ipv6 proto=6", "ipv6 proto=17", "ipv6 proto=58", "ipv6 proto=59", "ipv6 proto=132",
		"payload", "padded",
	} {
		assert.NotZero(t, seen[k], "Random never produced %s; it produced %v", k, seen)
	}
}

func TestRandomIsDeterministic(t *testing.T) {
	a, b := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	for range 100 {
		require.Equal(t, frames.Random(a), frames.Random(b), "same seed")
	}
}

func TestMutate(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		f := frames.Random(rng).Build()
		orig := append([]byte{}, f.Bytes...)
		m := frames.Mutate(rng, f)
		require.NotEqual(t, orig, m, "Mutate changed nothing")
		require.Equal(t, orig, f.Bytes, "input after Mutate")
		if len(m) > 0 {
			m[0]++ // must not show in f
			require.Equal(t, orig, f.Bytes, "input after a write to Mutate's result")
		}
		// Mutating the result again, with offsets that no longer fit,
		// must not panic either.
		for range 3 {
			m = frames.Mutate(rng, frames.Frame{Bytes: m, L3: f.L3, L4: f.L4, Payload: f.Payload})
		}
	}
	assert.Empty(t, frames.Mutate(rng, frames.Frame{L3: -1, L4: -1, Payload: -1}), "empty frame")
	for n := 1; n < 20; n++ {
		m := frames.Mutate(rng, frames.Frame{Bytes: make([]byte, n), L3: -1, L4: -1, Payload: -1})
		assert.LessOrEqual(t, len(m), n+4, "Mutate of %d bytes", n)
	}
}

func Example() {
	f := frames.Spec{
		VLANs:   []frames.VLAN{{ID: 10}},
		Src:     netip.MustParseAddr("2001:db8::1"),
		Dst:     netip.MustParseAddr("2001:db8::2"),
		IPv6Ext: []frames.ExtHeader{{Type: frames.ProtoFragment, More: true, ID: 1}},
		Proto:   frames.ProtoUDP,
		SrcPort: 5353, DstPort: 53,
		Payload: []byte("query"),
		PadTo:   64,
	}.Build()
	fmt.Println(f.Len(), f.L3, f.L4, f.Payload)
	fmt.Printf("% x\n", f.TruncateAt(f.L4, 4)[f.L4:])
	// Output:
	// 79 18 66 74
	// 14 e9 00 35
}

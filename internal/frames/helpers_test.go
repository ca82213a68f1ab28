package frames_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/internal/frames"
)

// hexBytes decodes a hex string with spaces and newlines.
func hexBytes(s string) []byte {
	b, err := hex.DecodeString(string(bytes.Join(bytes.Fields([]byte(s)), nil)))
	if err != nil {
		panic(err)
	}
	return b
}

// onesSum is the ones' complement sum of 16-bit words, written apart from
// the package's own: 32-bit accumulation folded once per word.
func onesSum(parts ...[]byte) uint16 {
	var all []byte
	for _, p := range parts {
		all = append(all, p...)
	}
	if len(all)%2 == 1 {
		all = append(all, 0)
	}
	var s uint32
	for i := 0; i < len(all); i += 2 {
		s += uint32(binary.BigEndian.Uint16(all[i:]))
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// verify checks f against s from the bytes up, with a parser of its own,
// and returns the first problem.
func verify(s frames.Spec, f frames.Frame) error {
	b := f.Bytes
	be := binary.BigEndian
	fail := fmt.Errorf

	if len(b) < 14 {
		return fail("frame of %d bytes", len(b))
	}
	dst, src := s.DstMAC, s.SrcMAC
	if dst == ([6]byte{}) {
		dst = [6]byte{2, 0, 0, 0, 0, 2}
	}
	if src == ([6]byte{}) {
		src = [6]byte{2, 0, 0, 0, 0, 1}
	}
	if !bytes.Equal(b[0:6], dst[:]) || !bytes.Equal(b[6:12], src[:]) {
		return fail("MACs % x, want %x %x", b[:12], dst, src)
	}
	off := 12
	for i, v := range s.VLANs {
		tpid := v.TPID
		if tpid == 0 {
			tpid = 0x8100
		}
		tci := be.Uint16(b[off+2:])
		if be.Uint16(b[off:]) != tpid || tci&0xfff != v.ID || uint8(tci>>13) != v.PCP || (tci&0x1000 != 0) != v.DEI {
			return fail("VLAN %d: % x, want %+v", i, b[off:off+4], v)
		}
		off += 4
	}
	et := be.Uint16(b[off:])
	off += 2

	end := 0 // end of the IP packet, or of the payload without IP
	switch {
	case !s.Src.IsValid():
		if et != s.EtherType {
			return fail("EtherType %#04x, want %#04x", et, s.EtherType)
		}
		if f.L3 != -1 || f.L4 != -1 || f.Payload != off {
			return fail("offsets %d/%d/%d, want -1/-1/%d", f.L3, f.L4, f.Payload, off)
		}
		end = off + len(s.Payload)
		if !bytes.Equal(b[off:end], s.Payload) {
			return fail("payload differs")
		}

	case s.Src.Is4():
		if et != 0x0800 {
			return fail("EtherType %#04x, want IPv4", et)
		}
		if f.L3 != off {
			return fail("L3 %d, want %d", f.L3, off)
		}
		h := b[off:]
		ihl := int(h[0] & 0xf)
		opts := (len(s.IPv4Options) + 3) / 4 * 4
		if h[0]>>4 != 4 || ihl != 5+opts/4 {
			return fail("version/IHL %#02x with %d bytes of options", h[0], len(s.IPv4Options))
		}
		if h[1] != s.TOS {
			return fail("TOS %d, want %d", h[1], s.TOS)
		}
		total := int(be.Uint16(h[2:]))
		end = off + total
		if end > len(b) {
			return fail("total length %d past the frame end", total)
		}
		if onesSum(h[:ihl*4]) != 0xffff {
			return fail("IPv4 header checksum %#04x does not verify", be.Uint16(h[10:]))
		}
		frag := be.Uint16(h[6:])
		if be.Uint16(h[4:]) != s.IPv4ID || frag&0x1fff != s.IPv4FragOffset ||
			(frag&0x2000 != 0) != s.IPv4MoreFragments || (frag&0x4000 != 0) != s.IPv4DontFragment || frag&0x8000 != 0 {
			return fail("ID/flags/fragment offset % x", h[4:8])
		}
		ttl := s.TTL
		if ttl == 0 {
			ttl = 64
		}
		if h[8] != ttl || h[9] != s.Proto {
			return fail("TTL/protocol %d/%d, want %d/%d", h[8], h[9], ttl, s.Proto)
		}
		if netip.AddrFrom4([4]byte(h[12:16])) != s.Src || netip.AddrFrom4([4]byte(h[16:20])) != s.Dst {
			return fail("addresses % x", h[12:20])
		}
		o := h[20 : ihl*4]
		if !bytes.Equal(o[:len(s.IPv4Options)], s.IPv4Options) || !bytes.Equal(o[len(s.IPv4Options):], make([]byte, opts-len(s.IPv4Options))) {
			return fail("options % x, want % x and zeros", o, s.IPv4Options)
		}
		pseudo := append(append(append([]byte{}, h[12:20]...), 0, s.Proto), be.AppendUint16(nil, uint16(total-ihl*4))...)
		l4 := off + ihl*4
		if err := verifyL4(s, f, b[l4:end], l4, pseudo, s.IPv4FragOffset != 0); err != nil {
			return err
		}

	default:
		if et != 0x86dd {
			return fail("EtherType %#04x, want IPv6", et)
		}
		if f.L3 != off {
			return fail("L3 %d, want %d", f.L3, off)
		}
		h := b[off:]
		vtf := be.Uint32(h)
		if vtf>>28 != 6 || uint8(vtf>>20) != s.TOS || vtf&0xfffff != s.FlowLabel&0xfffff {
			return fail("version/class/flow % x", h[:4])
		}
		end = off + 40 + int(be.Uint16(h[4:]))
		if end > len(b) {
			return fail("payload length %d past the frame end", be.Uint16(h[4:]))
		}
		ttl := s.TTL
		if ttl == 0 {
			ttl = 64
		}
		if h[7] != ttl {
			return fail("hop limit %d, want %d", h[7], ttl)
		}
		if netip.AddrFrom16([16]byte(h[8:24])) != s.Src || netip.AddrFrom16([16]byte(h[24:40])) != s.Dst {
			return fail("addresses % x", h[8:40])
		}
		next := h[6]
		pos := off + 40
		nonFirst := false
		for i, e := range s.IPv6Ext {
			if next != e.Type {
				return fail("next header %d before extension %d, want %d", next, i, e.Type)
			}
			x := b[pos:]
			next = x[0]
			var n int
			switch e.Type {
			case 44:
				n = 8
				fo := be.Uint16(x[2:])
				if x[1] != 0 || fo>>3 != e.FragOffset || fo&6 != 0 || (fo&1 == 1) != e.More || be.Uint32(x[4:]) != e.ID {
					return fail("fragment header % x, want %+v", x[:8], e)
				}
				nonFirst = nonFirst || e.FragOffset != 0
			case 51:
				n = (int(x[1]) + 2) * 4
				if want := max(e.Len, 16); n != want {
					return fail("AH of %d bytes, want %d", n, want)
				}
			default:
				n = (int(x[1]) + 1) * 8
				if want := max(e.Len, 8); n != want {
					return fail("extension %d of %d bytes, want %d", i, n, want)
				}
				if e.Type == 0 || e.Type == 60 {
					if err := verifyOptions(x[2:n]); err != nil {
						return fail("extension %d: %v", i, err)
					}
				}
			}
			pos += n
		}
		if next != s.Proto {
			return fail("last next header %d, want %d", next, s.Proto)
		}
		var pseudo []byte
		pseudo = append(pseudo, h[8:40]...)
		pseudo = be.AppendUint32(pseudo, uint32(end-pos))
		pseudo = append(pseudo, 0, 0, 0, s.Proto)
		if err := verifyL4(s, f, b[pos:end], pos, pseudo, nonFirst); err != nil {
			return err
		}
	}

	if want := max(end, s.PadTo); len(b) != want {
		return fail("frame of %d bytes, want %d", len(b), want)
	}
	if !bytes.Equal(b[end:], make([]byte, len(b)-end)) {
		return fail("padding is not zeros: % x", b[end:])
	}
	return nil
}

// verifyOptions checks the options area of a hop-by-hop or destination
// options header the way Linux does: well-formed TLVs that exactly fill
// it, no more than 7 bytes of padding in a row, at most 8 options other
// than padding, and only the types Build uses, with zero data.
func verifyOptions(o []byte) error {
	pad, count := 0, 0
	for len(o) > 0 {
		if o[0] == 0 { // Pad1
			pad++
			o = o[1:]
		} else {
			if len(o) < 2 || len(o) < 2+int(o[1]) {
				return fmt.Errorf("option % x overruns the header", o)
			}
			switch o[0] {
			case 1: // PadN
				pad += 2 + int(o[1])
			case 0x1e: // experiment, skip if unknown
				pad = 0
				count++
			default:
				return fmt.Errorf("unexpected option type %#x", o[0])
			}
			if !bytes.Equal(o[2:2+int(o[1])], make([]byte, o[1])) {
				return fmt.Errorf("option data % x not zero", o[2:2+int(o[1])])
			}
			o = o[2+int(o[1]):]
		}
		if pad > 7 {
			return fmt.Errorf("%d bytes of padding in a row", pad)
		}
	}
	if count > 8 {
		return fmt.Errorf("%d options", count)
	}
	return nil
}

// verifyL4 checks seg, what follows the IP headers at offset l4.
func verifyL4(s frames.Spec, f frames.Frame, seg []byte, l4 int, pseudo []byte, nonFirst bool) error {
	be := binary.BigEndian
	fail := fmt.Errorf
	if nonFirst {
		if f.L4 != -1 || f.Payload != l4 || !bytes.Equal(seg, s.Payload) {
			return fail("non-first fragment: L4 %d payload %d, want -1 and %d with the raw payload", f.L4, f.Payload, l4)
		}
		return nil
	}
	if f.L4 != l4 {
		return fail("L4 %d, want %d", f.L4, l4)
	}
	hlen := 0
	switch s.Proto {
	case 6:
		hlen = int(seg[12]>>4) * 4
		flags := s.TCPFlags
		if flags == 0 {
			flags = 0x02
		}
		if be.Uint16(seg) != s.SrcPort || be.Uint16(seg[2:]) != s.DstPort || seg[13] != flags ||
			hlen != 20+(len(s.TCPOptions)+3)/4*4 || !bytes.Equal(seg[20:20+len(s.TCPOptions)], s.TCPOptions) {
			return fail("TCP header % x", seg[:hlen])
		}
		if onesSum(pseudo, seg) != 0xffff {
			return fail("TCP checksum %#04x does not verify", be.Uint16(seg[16:]))
		}
	case 17:
		hlen = 8
		if be.Uint16(seg) != s.SrcPort || be.Uint16(seg[2:]) != s.DstPort || int(be.Uint16(seg[4:])) != len(seg) {
			return fail("UDP header % x for %d bytes", seg[:8], len(seg))
		}
		if be.Uint16(seg[6:]) == 0 || onesSum(pseudo, seg) != 0xffff {
			return fail("UDP checksum %#04x does not verify", be.Uint16(seg[6:]))
		}
	case 1, 58:
		hlen = 8
		if seg[0] != s.ICMPType || seg[1] != s.ICMPCode || be.Uint32(seg[4:]) != 0 {
			return fail("ICMP header % x", seg[:8])
		}
		sum := onesSum(seg)
		if s.Proto == 58 {
			sum = onesSum(pseudo, seg)
		}
		if sum != 0xffff {
			return fail("ICMP checksum %#04x does not verify", be.Uint16(seg[2:]))
		}
	}
	if f.Payload != l4+hlen || !bytes.Equal(seg[hlen:], s.Payload) {
		return fail("payload at %d (want %d) differs", f.Payload, l4+hlen)
	}
	return nil
}

func mustVerify(t *testing.T, s frames.Spec, f frames.Frame) {
	t.Helper()
	require.NoError(t, verify(s, f), "spec %+v\n%s", s, hex.Dump(f.Bytes))
}

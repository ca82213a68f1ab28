package frames

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
)

// mutation is a kind of change Mutate makes.
type mutation int

const (
	mutFlip     mutation = iota // XOR one header byte with a non-zero value
	mutTruncate                 // cut the frame inside its headers
	mutLength                   // set a length field to another value
	mutProto                    // set an EtherType, Protocol or Next Header to another value
	mutVLAN                     // insert a VLAN tag before an EtherType or TPID
	numMutations
)

func (m mutation) String() string {
	return [...]string{"flip", "truncate", "length", "proto", "vlan"}[m]
}

// Mutate returns a copy of f.Bytes with one random structural change, for
// differential fuzzing of a packet parser: a header byte flipped, the frame
// cut short inside its headers (possibly below 14 bytes), a length field
// (IPv4 IHL or total length, IPv6 payload length, extension header length,
// TCP data offset, UDP length) set to another value, an EtherType, IPv4
// Protocol or IPv6 Next Header changed, or a VLAN tag inserted. Fields are
// found by walking the bytes themselves, so f may already be damaged; when
// the drawn change has no field to work on, a byte is flipped instead.
// Checksums are not updated. An empty frame is returned empty.
func Mutate(rng *rand.Rand, f Frame) []byte {
	b, _ := mutate(rng, f)
	return b
}

func mutate(rng *rand.Rand, f Frame) ([]byte, mutation) {
	b := slices.Clone(f.Bytes)
	if len(b) == 0 {
		return b, mutFlip
	}
	l := walk(b)
	end := len(b)
	switch {
	case f.Payload > 0 && f.Payload <= len(b):
		end = f.Payload
	case l.end > 0:
		end = l.end
	}

	m := mutation(rng.IntN(int(numMutations)))
	switch {
	case m == mutLength && len(l.lengths) == 0,
		m == mutProto && len(l.protos) == 0 && len(l.types) == 0,
		m == mutVLAN && len(l.types) == 0:
		m = mutFlip
	}

	switch m {
	case mutFlip:
		b[rng.IntN(end)] ^= byte(1 + rng.IntN(255))
	case mutTruncate:
		b = slices.Clip(b[:rng.IntN(end)])
	case mutLength:
		l.lengths[rng.IntN(len(l.lengths))].set(rng, b)
	case mutProto:
		if i := rng.IntN(len(l.protos) + len(l.types)); i < len(l.protos) {
			off := l.protos[i]
			b[off] = differ(rng, b[off], ProtoHopByHop, ProtoICMP, ProtoTCP, ProtoUDP,
				ProtoRouting, ProtoFragment, ProtoGRE, ProtoESP, ProtoAH, ProtoICMPv6,
				ProtoNoNext, ProtoDestOpts, ProtoSCTP, 135, 139, 140, 253, 255, byte(rng.Uint32()))
		} else {
			off := l.types[i-len(l.protos)]
			cur := binary.BigEndian.Uint16(b[off:])
			binary.BigEndian.PutUint16(b[off:], differ(rng, cur, EtherTypeIPv4, EtherTypeIPv6,
				TPID8021Q, TPID8021AD, 0x9100, EtherTypeARP, EtherTypeLLDP, 0, uint16(rng.Uint32())))
		}
	case mutVLAN:
		off := l.types[rng.IntN(len(l.types))]
		tag := binary.BigEndian.AppendUint16(nil, pick(rng, TPID8021Q, TPID8021AD))
		tag = binary.BigEndian.AppendUint16(tag, uint16(rng.Uint32()))
		b = slices.Insert(b, off, tag...)
	}
	return b, m
}

// differ returns one of choices that is not cur, or cur+1 if rng draws cur.
func differ[T uint8 | uint16](rng *rand.Rand, cur T, choices ...T) T {
	if v := pick(rng, choices...); v != cur {
		return v
	}
	return cur + 1
}

// layout lists the fields of a frame that Mutate knows how to change.
type layout struct {
	types   []int // offsets of 16-bit EtherType and TPID fields
	protos  []int // offsets of IPv4 Protocol and IPv6 Next Header bytes
	lengths []lengthField
	end     int // end of the last header found
}

type lengthKind int

const (
	lowNibble  lengthKind = iota // IPv4 IHL
	highNibble                   // TCP data offset
	byteLen                      // IPv6 extension header length
	wordLen                      // 16-bit big-endian lengths
)

type lengthField struct {
	off  int
	kind lengthKind
}

// set gives the field a new value, often one near the right one or at an
// edge of its range.
func (fl lengthField) set(rng *rand.Rand, b []byte) {
	switch fl.kind {
	case lowNibble:
		b[fl.off] = b[fl.off]&0xf0 | byte(newLength(rng, int(b[fl.off]&0x0f), 0xf))
	case highNibble:
		b[fl.off] = b[fl.off]&0x0f | byte(newLength(rng, int(b[fl.off]>>4), 0xf))<<4
	case byteLen:
		b[fl.off] = byte(newLength(rng, int(b[fl.off]), 0xff))
	case wordLen:
		cur := int(binary.BigEndian.Uint16(b[fl.off:]))
		binary.BigEndian.PutUint16(b[fl.off:], uint16(newLength(rng, cur, 0xffff)))
	}
}

// newLength returns a value other than cur in [0, mask], mask being 2^n-1.
func newLength(rng *rand.Rand, cur, mask int) int {
	var v int
	switch rng.IntN(6) {
	case 0:
		v = 0
	case 1:
		v = cur + 1
	case 2:
		v = cur - 1
	case 3:
		v = mask
	case 4:
		v = cur + 2 + rng.IntN(16)
	default:
		v = rng.IntN(mask + 1)
	}
	v &= mask
	if v == cur {
		v = (cur + 1) & mask
	}
	return v
}

// walk finds the header fields of b the way a parser would, trusting each
// length it meets but never reading past the end.
func walk(b []byte) layout {
	var l layout
	off := 12
	var et uint16
	for off+2 <= len(b) {
		l.types = append(l.types, off)
		et = binary.BigEndian.Uint16(b[off:])
		off += 2
		l.end = off
		if et != TPID8021Q && et != TPID8021AD {
			break
		}
		off += 2 // TCI
	}

	l3 := l.end
	var proto uint8
	l4 := -1
	switch {
	case et == EtherTypeIPv4 && l3+IPv4Len <= len(b):
		l.lengths = append(l.lengths, lengthField{l3, lowNibble}, lengthField{l3 + 2, wordLen})
		l.protos = append(l.protos, l3+9)
		proto = b[l3+9]
		hlen := int(b[l3]&0x0f) * 4
		l.end = min(l3+max(hlen, IPv4Len), len(b))
		if hlen >= IPv4Len && binary.BigEndian.Uint16(b[l3+6:])&0x1fff == 0 {
			l4 = l3 + hlen
		}
	case et == EtherTypeIPv6 && l3+IPv6Len <= len(b):
		l.lengths = append(l.lengths, lengthField{l3 + 4, wordLen})
		l.protos = append(l.protos, l3+6)
		proto = b[l3+6]
		off := l3 + IPv6Len
		l.end = off
		l4 = off
		for range 16 {
			if off+8 > len(b) || !isExt(proto) {
				break
			}
			l.protos = append(l.protos, off)
			n := (int(b[off+1]) + 1) * 8
			switch proto {
			case ProtoFragment:
				n = 8
				if binary.BigEndian.Uint16(b[off+2:])>>3 != 0 {
					l4 = -1
				}
			case ProtoAH:
				n = (int(b[off+1]) + 2) * 4
				l.lengths = append(l.lengths, lengthField{off + 1, byteLen})
			default:
				l.lengths = append(l.lengths, lengthField{off + 1, byteLen})
			}
			proto = b[off]
			off += n
			l.end = min(off, len(b))
			if l4 >= 0 {
				l4 = off
			}
		}
	}
	if l4 < 0 || l4 >= len(b) {
		return l
	}

	switch proto {
	case ProtoTCP:
		if l4+13 <= len(b) {
			l.lengths = append(l.lengths, lengthField{l4 + 12, highNibble})
			l.end = min(l4+max(int(b[l4+12]>>4)*4, TCPLen), len(b))
		}
	case ProtoUDP:
		if l4+6 <= len(b) {
			l.lengths = append(l.lengths, lengthField{l4 + 4, wordLen})
			l.end = min(l4+UDPLen, len(b))
		}
	case ProtoICMP, ProtoICMPv6:
		l.end = min(l4+ICMPLen, len(b))
	}
	return l
}

func isExt(p uint8) bool {
	switch p {
	case ProtoHopByHop, ProtoRouting, ProtoFragment, ProtoDestOpts, ProtoAH,
		135, 139, 140: // mobility, HIP, shim6

		return true
	}
	return false
}

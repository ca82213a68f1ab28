package frames

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWalkFindsFields(t *testing.T) {
	f := Spec{
		VLANs: []VLAN{{TPID: TPID8021AD, ID: 1}, {ID: 2}},
		Src:   netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"),
		IPv6Ext: []ExtHeader{{Type: ProtoHopByHop}, {Type: ProtoFragment, More: true}, {Type: ProtoAH}},
		Proto:   ProtoTCP,
		Payload: []byte("data"),
	}.Build()
	l := walk(f.Bytes)
	l3 := f.L3 // 22
	want := layout{
		types:  []int{12, 16, 20},
		protos: []int{l3 + 6, l3 + 40, l3 + 48, l3 + 56},
		lengths: []lengthField{
			{l3 + 4, wordLen},
			{l3 + 41, byteLen}, // hop-by-hop
			{l3 + 57, byteLen}, // AH
			{f.L4 + 12, highNibble},
		},
		end: f.Payload,
	}
	assert.Equal(t, want, l)

	v4 := UDP4("10.0.0.1", "10.0.0.2", 1, 2, 3)
	l = walk(v4.Bytes)
	want = layout{
		types:   []int{12},
		protos:  []int{23},
		lengths: []lengthField{{14, lowNibble}, {16, wordLen}, {38, wordLen}},
		end:     42,
	}
	assert.Equal(t, want, l)
}

// TestWalkAgreesWithBuild checks that for every frame Random can make,
// the walk ends where Build put the payload, and that the walk survives
// every truncation.
func TestWalkAgreesWithBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for range 5000 {
		s := Random(rng)
		f := s.Build()
		require.Equal(t, f.Payload, walk(f.Bytes).end, "where the walk ends\nspec %+v\n% x", s, f.Bytes)
		for n := range f.Payload {
			walk(f.Bytes[:n])
		}
	}
}

func TestMutationKinds(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	counts := map[mutation]int{}
	for range 20000 {
		f := Random(rng).Build()
		orig := f.Bytes
		l := walk(orig)
		b, m := mutate(rng, f)
		counts[m]++

		var diff []int
		if len(b) == len(orig) {
			for i := range b {
				if b[i] != orig[i] {
					diff = append(diff, i)
				}
			}
		}
		switch m {
		case mutFlip:
			require.Len(t, b, len(orig), "flip")
			require.Len(t, diff, 1, "flip")
			require.Less(t, diff[0], f.Payload, "flip")
		case mutTruncate:
			require.Less(t, len(b), f.Payload, "truncate")
			require.Equal(t, orig[:len(b)], b, "truncate")
		case mutLength:
			require.True(t, len(diff) > 0 && inOneField(diff, l.lengths), "length: changed %v, fields %v", diff, l.lengths)
		case mutProto:
			var fields []lengthField // reuse the span check: 1 byte or 2
			for _, off := range l.protos {
				fields = append(fields, lengthField{off, byteLen})
			}
			for _, off := range l.types {
				fields = append(fields, lengthField{off, wordLen})
			}
			require.True(t, len(diff) > 0 && inOneField(diff, fields), "proto: changed %v, protos %v, types %v", diff, l.protos, l.types)
		case mutVLAN:
			ok := false
			for _, off := range l.types {
				tpid := binary.BigEndian.Uint16(b[off:])
				if len(b) == len(orig)+4 && bytes.Equal(b[:off], orig[:off]) && bytes.Equal(b[off+4:], orig[off:]) &&
					(tpid == TPID8021Q || tpid == TPID8021AD) {
					ok = true
				}
			}
			require.True(t, ok, "vlan: no tag inserted at any of %v\n% x\n% x", l.types, orig, b)
		}
	}
	for m := range numMutations {
		assert.GreaterOrEqual(t, counts[m], 2000, "%v mutations of 20000", m)
	}
}

// inOneField reports whether the changed offsets all fall in one field,
// and for a nibble field in its own 4 bits (checked by the caller's diff
// being a single byte).
func inOneField(diff []int, fields []lengthField) bool {
	for _, fl := range fields {
		size := 1
		if fl.kind == wordLen {
			size = 2
		}
		in := true
		for _, d := range diff {
			if d < fl.off || d >= fl.off+size {
				in = false
			}
		}
		if in {
			return true
		}
	}
	return false
}

func TestMutateNibbles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	b := []byte{0x45, 0x50}
	for range 1000 {
		lengthField{0, lowNibble}.set(rng, b)
		lengthField{1, highNibble}.set(rng, b)
		require.EqualValues(t, 4, b[0]>>4, "version next to IHL")
		require.EqualValues(t, 0, b[1]&0x0f, "reserved bits next to the TCP data offset")
	}
}

func TestNewLength(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	seen := map[int]bool{}
	for range 10000 {
		v := newLength(rng, 5, 0xf)
		require.True(t, v != 5 && v >= 0 && v <= 0xf, "newLength(5, 0xf) = %d", v)
		seen[v] = true
	}
	assert.Len(t, seen, 15, "values of newLength(5, 0xf)")
	for _, cur := range []int{0, 0xffff} {
		for range 1000 {
			v := newLength(rng, cur, 0xffff)
			require.True(t, v != cur && v >= 0 && v <= 0xffff, "newLength(%d, 0xffff) = %d", cur, v)
		}
	}
}

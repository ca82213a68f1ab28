package fastdrop

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/xdpdrop/xdpdrop/gen"
)

// CmpOp is how a numeric range was written: a value or LO-HI, or a
// comparison with one value (FlowSpec's numeric operators lt, gt, eq
// and their and-chains all compile to such a range). The values are
// enum fd_cmp in bpf/fastdrop.h (fd_rule_rec.len_op).
type CmpOp uint8

const (
	CmpNone  CmpOp = iota // no len field (the zero LenRange)
	CmpRange              // N or LO-HI
	CmpGT                 // >N
	CmpGE                 // >=N
	CmpLT                 // <N
	CmpLE                 // <=N
)

var cmpText = [...]string{CmpGT: ">", CmpGE: ">=", CmpLT: "<", CmpLE: "<="}

// LenRange is what len matches: the IP packet's length as FlowSpec type
// 10 defines it (RFC 8955 4.2.2.10: the total IP packet length, excluding
// layer 2 but including the IP header; RFC 8956 leaves the component as
// it is): IPv4's total length, IPv6's 40 + payload length (so extension
// headers count). With Op CmpRange it is Lo-Hi; with CmpGT and CmpGE, Lo
// is the value written and there is no upper bound (an IPv6 packet may be
// longer than 65535 bytes); with CmpLT and CmpLE, Hi is the value written.
// The zero LenRange (CmpNone) is no len field.
type LenRange struct {
	Lo, Hi uint16
	Op     CmpOp
}

// bounds returns the lengths r allows, lo to hi inclusive (hi may be
// below lo: none).
func (l LenRange) bounds() (lo, hi int) {
	switch l.Op {
	case CmpGT:
		return int(l.Lo) + 1, 1<<17 - 1
	case CmpGE:
		return int(l.Lo), 1<<17 - 1
	case CmpLT:
		return 0, int(l.Hi) - 1
	case CmpLE:
		return 0, int(l.Hi)
	}
	return int(l.Lo), int(l.Hi)
}

// Contains reports whether a packet of length n matches l.
func (l LenRange) Contains(n int) bool {
	lo, hi := l.bounds()
	return lo <= n && n <= hi
}

func (l LenRange) String() string {
	switch l.Op {
	case CmpGT, CmpGE:
		return cmpText[l.Op] + strconv.Itoa(int(l.Lo))
	case CmpLT, CmpLE:
		return cmpText[l.Op] + strconv.Itoa(int(l.Hi))
	}
	return PortRange{l.Lo, l.Hi}.String()
}

const wantLen = "want a packet length 0-65535, a range like 0-1023, or a comparison like >1024, >=1024, <64 or <=64"

// parseLen parses len's value: N, LO-HI, >N, >=N, <N or <=N.
func parseLen(s string) (*LenRange, string) {
	num := func(t string) (uint16, string) {
		n, ok := parseUint(t, 6)
		if !ok {
			return 0, fmt.Sprintf("%q is not a number (%s)", clipped(t), wantLen)
		}
		if n > 65535 {
			return 0, fmt.Sprintf("%d is not a length 0-65535: FlowSpec lengths have 16 bits and an IPv4 packet has at most 65535 bytes (%s)", n, wantLen)
		}
		return uint16(n), ""
	}
	for _, op := range []CmpOp{CmpGE, CmpLE, CmpGT, CmpLT} {
		rest, ok := strings.CutPrefix(s, cmpText[op])
		if !ok {
			continue
		}
		n, msg := num(rest)
		if msg != "" {
			return nil, msg
		}
		if op == CmpLT && n == 0 {
			return nil, "<0 never matches: no packet is shorter than 0 bytes"
		}
		if op == CmpGT || op == CmpGE {
			return &LenRange{Lo: n, Op: op}, ""
		}
		return &LenRange{Hi: n, Op: op}, ""
	}
	if strings.HasPrefix(s, "=") || strings.HasPrefix(s, "!") {
		return nil, fmt.Sprintf("%s (write len 100 for exactly 100)", wantLen)
	}
	los, his, isRange := strings.Cut(s, "-")
	lo, msg := num(los)
	if msg != "" {
		return nil, msg
	}
	hi := lo
	if isRange {
		if hi, msg = num(his); msg != "" {
			return nil, msg
		}
		if lo > hi {
			return nil, fmt.Sprintf("range is empty (write the lower value first: %d-%d)", hi, lo)
		}
	}
	return &LenRange{Lo: lo, Hi: hi, Op: CmpRange}, ""
}

// lenField is the entry of len (FlowSpec type 10), a direct field of 17
// bits (struct fd_pkt's pktlen).
func lenField() matchField {
	return matchField{
		name:     "len",
		examples: []string{"drop udp sport 53 len >1024", "drop len 0-63", "pass src 2001:db8::/32 len <=576", "drop len >=1500", "drop len <64", "drop frag len 1500", "drop len >65535"},
		need:     "len needs a value (" + wantLen + ")",
		parse: func(r *Rule, v string) string {
			l, msg := parseLen(v)
			if msg != "" {
				return fmt.Sprintf("len %s: %s", clipped(v), msg)
			}
			r.Len = *l
			return ""
		},
		at:      unsafe.Offsetof(Rule{}.Len) + unsafe.Offsetof(LenRange{}.Op),
		store:   storeU8,
		text:    func(r *Rule) string { return "len " + r.Len.String() },
		textPos: 13,
		ip:      true,
		check: func(r *Rule) error {
			l := r.Len
			if l.Op == CmpNone || l.Op > CmpLE {
				return fmt.Errorf("len: unknown comparison %d", l.Op)
			}
			if lo, hi := l.bounds(); lo > hi {
				return fmt.Errorf("len %s never matches (%s)", l, wantLen)
			}
			return nil
		},
		match: func(r *Rule, pkt *packet) bool { return pkt.isIP && r.Len.Contains(pkt.pktLen) },
		direct: &directField{fld: int(gen.FastdropFdFieldFD_FLD_LEN), off: int(gen.FastdropFdDirectFD_DIR_LEN), bits: 17,
			spans: func(r *Rule, dst []span) []span { lo, hi := r.Len.bounds(); return append(dst, span{lo, hi}) }},
		recFlag: uint32(gen.FastdropFdRecFlagsFD_REC_LEN),
		rec:     []recMember{{"len_lo", recLen, 2}, {"len_hi", recLen + 2, 2}, {"len_op", recLen + 4, 1}},
		encode: func(b []byte, r *Rule) {
			binary.LittleEndian.PutUint16(b[recLen:], r.Len.Lo)
			binary.LittleEndian.PutUint16(b[recLen+2:], r.Len.Hi)
			b[recLen+4] = uint8(r.Len.Op)
		},
		decode: func(b []byte, r *Rule) {
			r.Len = LenRange{Lo: binary.LittleEndian.Uint16(b[recLen:]), Hi: binary.LittleEndian.Uint16(b[recLen+2:]), Op: CmpOp(b[recLen+4])}
		},
	}
}

package fastdrop

import (
	"fmt"
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

// lenSpec is len's numSpec: FlowSpec type 10, the IP packet's length
// (RFC 8955 4.2.2.10: the total IP packet length, excluding layer 2 but
// including the IP header; RFC 8956 leaves the component as it is):
// IPv4's total length, IPv6's 40 + payload length (so extension headers
// count). Written values are 0-65535 (FlowSpec's 16 bits), but an IPv6
// packet may be up to 65575 bytes long, so >N and >=N reach 17 bits.
var lenSpec = numSpec{name: "len", max: 1<<17 - 1, writeMax: 65535, want: "a packet length 0-65535", noun: "a length", rng: "0-1023", cmp: ">1024", list: "64,1500",
	over: func(n uint32) string {
		return fmt.Sprintf("%d is not a length 0-65535: FlowSpec lengths have 16 bits and an IPv4 packet has at most 65535 bytes (%s)", n, wantLen)
	}}

const wantLen = "want a packet length 0-65535, a range like 0-1023, a comparison like >1024, >=1024, <64 or <=64, or a list like 64,1500"

// lenField is the entry of len, a direct field of 17 bits (struct
// fd_pkt's pktlen).
func lenField() matchField {
	return numEntry(numOpts{
		spec:     lenSpec,
		at:       unsafe.Offsetof(Nums{}.Len),
		examples: []string{"drop udp sport 53 len >1024", "drop len 0-63", "pass src 2001:db8::/32 len <=576", "drop len >=1500", "drop len <64", "drop frag len 1500", "drop len >65535", "drop len 64,128,1500", "drop udp len !0-1023"},
		textPos:  13,
		ip:       true,
		value:    func(p *packet) (uint32, bool) { return uint32(p.pktLen), p.isIP },
		fld:      int(gen.FastdropFdFieldFD_FLD_LEN), dir: int(gen.FastdropFdDirectFD_DIR_LEN), bits: 17,
		recFlag: uint32(gen.FastdropFdRecFlagsFD_REC_LEN),
		rec:     recNum{lo: recLen, hi: recLen + 2, width: 2, op: recLen + 4, named: -1},
	})
}

package fastdrop

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/xdpdrop/xdpdrop/gen"
)

// portEitherField is the entry of port (FlowSpec type 4): a TCP or UDP
// frame whose source port or destination port is in the range. The
// classifier has one entry per rule, as for every field: port's table
// (EITHER in FD_DIRECT_FIELDS) is looked up at both of the frame's ports
// and the two rule sets ORed before the AND with the other fields', which
// is exact, keeps a rule one bit of the bit vectors (so one counter slot,
// one line in listings, and one of MaxCompoundRules and of the 64-rule
// fast path), and costs two loads only when some rule uses port. Its
// value is Rule.Port with Rule.HasPort (not a pointer: see Rule.Len).
func portEitherField() matchField {
	return matchField{
		name:     "port",
		examples: []string{"pass udp port 53", "drop tcp src 192.0.2.0/24 port 1024-65535", "drop udp sport 53 port 0"},
		need:     "port needs a value (want a port 0-65535 or a range like 1024-65535)",
		parse: func(r *Rule, v string) string {
			pr, msg := parsePortRange(v)
			if msg != "" {
				return fmt.Sprintf("port %s: %s", clipped(v), msg)
			}
			r.Port, r.HasPort = *pr, true
			return ""
		},
		at:      unsafe.Offsetof(Rule{}.HasPort),
		store:   storeBool,
		text:    func(r *Rule) string { return "port " + r.Port.String() },
		textPos: 15,
		ip:      true,
		check: func(r *Rule) error {
			p := r.Port
			switch {
			case p.Lo > p.Hi:
				return fmt.Errorf("port %d-%d: range is empty (write the lower port first)", p.Lo, p.Hi)
			case !r.HasProto || (r.Proto != ProtoTCP && r.Proto != ProtoUDP):
				return fmt.Errorf("port needs protocol tcp or udp (write e.g. \"udp port %s\")", p)
			case r.Fragment:
				return fmt.Errorf("frag never matches together with port: non-first fragments carry no L4 header")
			case r.FragBits.Set&FragLast != 0:
				return fmt.Errorf("frag %s never matches together with port: a last fragment carries no L4 header (write frag first, or leave port out)", r.FragBits)
			}
			return nil
		},
		frames: framesPorts,
		match: func(r *Rule, pkt *packet) bool {
			return pkt.hasPorts && (r.Port.Contains(pkt.sport) || r.Port.Contains(pkt.dport))
		},
		direct: &directField{fld: int(gen.FastdropFdFieldFD_FLD_PORT), off: int(gen.FastdropFdDirectFD_DIR_PORT), bits: 16,
			spans: func(r *Rule, dst []span) []span { return append(dst, span{int(r.Port.Lo), int(r.Port.Hi)}) }},
		recFlag: uint32(gen.FastdropFdRecFlagsFD_REC_PORT),
		rec:     []recMember{{"port_lo", recPort, 2}, {"port_hi", recPort + 2, 2}},
		encode: func(b []byte, r *Rule) {
			binary.LittleEndian.PutUint16(b[recPort:], r.Port.Lo)
			binary.LittleEndian.PutUint16(b[recPort+2:], r.Port.Hi)
		},
		decode: func(b []byte, r *Rule) {
			r.Port = PortRange{Lo: binary.LittleEndian.Uint16(b[recPort:]), Hi: binary.LittleEndian.Uint16(b[recPort+2:])}
			r.HasPort = true
		},
	}
}

package fastdrop

import (
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
	spec := portSpec("port")
	f := numEntry(numOpts{
		spec:     spec,
		at:       unsafe.Offsetof(Nums{}.Port),
		examples: []string{"pass udp port 53", "drop tcp src 192.0.2.0/24 port 1024-65535", "drop udp sport 53 port 0", "drop udp port 53,123,11211", "drop tcp port !22,443", "drop udp port <1024"},
		textPos:  15,
		ip:       true,
		frames:   framesPorts,
		check: func(r *Rule, n *Num) error {
			if err := needPorts(r, "port", spec.text(r, n)); err != nil {
				return err
			}
			if r.FragBits.Set&FragLast != 0 {
				return fmt.Errorf("frag %s never matches together with port: a last fragment carries no L4 header (write frag first, or leave port out)", r.FragBits)
			}
			return nil
		},
		fld: int(gen.FastdropFdFieldFD_FLD_PORT), dir: int(gen.FastdropFdDirectFD_DIR_PORT), bits: 16,
		recFlag: uint32(gen.FastdropFdRecFlagsFD_REC_PORT),
		rec:     recNum{lo: recPort, hi: recPort + 2, width: 2, op: -1, named: -1},
	})
	// Either port: the value list applies to each, ORed (FlowSpec's
	// port component; port !22 matches a frame one of whose ports is
	// not 22).
	f.match = func(r *Rule, pkt *packet) bool {
		n := f.numOf(r)
		return pkt.hasPorts && (n.Contains(uint32(pkt.sport)) || n.Contains(uint32(pkt.dport)))
	}
	return f
}

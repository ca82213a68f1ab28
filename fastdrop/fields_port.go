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
// fast path), and costs two loads only when some rule uses port.
func portEitherField() matchField {
	f := portField("port", unsafe.Offsetof(Rule{}.Port), recPlace{flag: uint32(gen.FastdropFdRecFlagsFD_REC_PORT), val: recPort},
		int(gen.FastdropFdFieldFD_FLD_PORT), int(gen.FastdropFdDirectFD_DIR_PORT), func(r *Rule) **PortRange { return &r.Port }, nil, 15)
	f.examples = []string{"pass udp port 53", "drop tcp src 192.0.2.0/24 port 1024-65535", "drop udp sport 53 port 0"}
	f.match = func(r *Rule, pkt *packet) bool {
		return pkt.hasPorts && (r.Port.Contains(pkt.sport) || r.Port.Contains(pkt.dport))
	}
	check := f.check
	f.check = func(r *Rule) error {
		if err := check(r); err != nil {
			return err
		}
		if b := r.FragBits; b != nil && b.Set&FragLast != 0 {
			return fmt.Errorf("frag %s never matches together with port: a last fragment carries no L4 header (write frag first, or leave port out)", b)
		}
		return nil
	}
	return f
}

package fastdrop

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/xdpdrop/xdpdrop/gen"
)

// layoutFingerprints holds, for each FD_LAYOUT_VERSION, the fingerprint
// of what user space writes into the maps (see layoutFingerprint). A
// change to any of it must come with a new version, or Open would let this
// xdpdrop misread pins of the last one.
var layoutFingerprints = map[uint32]string{
	1: "dab52b0dcc0fafab",
	2: "2d5d68a22a76175d", // records of 128 bytes; direct tables FD_DIR_*; ttl
	3: "44bd7b78f3997bb1", // tcp flags
	4: "b7b0562abe2e616f", // queue field, rule origins, late rules, AF_XDP sockets
	5: "931fce7e2bc24f10", // limit rules: fd_police, bans; their parameters in the record
	6: "0e46039f9a968cd9", // capture slots in fd_main, fd_cap_cpu; the sample modifier
	// 7 was h/fields' limit rules with dscp, type and code before it merged main's 6: never released.
	8:  "b33142254a5f7854", // the sample modifier with dscp, icmp type and code
	9:  "85d465a13470dd9a", // fd_rule_rec of 160 bytes: len (FlowSpec type 10)
	10: "2ef0de74fd46a2c3", // frag with bits: frag_set, frag_clear
	11: "22bfda53491a9f6c", // port (source or destination): port_lo, port_hi
	12: "22bfda53491a9f6c", // len_op 0 is no len field (enum fd_cmp from 1), which BTF does not show
	13: "85d1ebeb1f2ce775", // comparisons on ttl, dscp, type, code: ttl_op, dscp_op, type_op, code_op
	14: "c460f06915a19747", // value lists and negated lists: FD_REC_LISTS and fd_rule_lists; comparison records keep the value written
	15: "997b794210afaf1b", // flowlabel: a direct field of 20 bits, FD_REC_FLOWLABEL
	// 14-16 were h/police's before it merged main's 14 and 15: never released.
	17: "4611f0412542e26c", // the policers on jiffies (fd_ban.end, fd_police.ban_end), fd_pol_src a set-associative array (fd_src_set, fd_src_ent, FD_SRC_WAYS), fd_pcnt.evicted; fd_police, fd_pcnt, fd_src_key, fd_ban fingerprinted from here on
	// 16 was h/hot's before it merged main's 17: never released.
	18: "9b7aba8b9cecd610", // fd_conf.features and FD_FEAT_*: the plain path for rule sets that need none
	19: "173aa0f341ea46b5", // FD_FEAT_CAPTURE: captures set a feature bit instead of the plain path reading cap_active
	// 19 was also h/dsttable's before it merged main's 19: never released.
	20: "0b90fc0fc1cbdba1", // the destination prefix table: fd_conf.d4_count, d6_count, fd_half.dconf, FD_FEAT_DST
	// 19-22 were h/fields' before it merged main's 19 and 20: never released.
	23: "a0d1c9a971d91c13", // IPv6 prefix offsets (fd_rule_rec.src_off, dst_off; fd_conf.noff6, off6_dst; the entries at FD_BM_OFF6; FD_FLD_OFF6); rules as written (fd_rule_text, FD_REC_TEXT, FD_TEXT_SIZE)
	// 19-21 were also h/police's before it merged main's 19-23: never released.
	24: "1a32c94c282b536f", // fd_src_ent of 16 bytes (tag, tat) in sets of 8 (FD_SRC_WAYS), two lines each
}

// layoutTypes are the C types whose layout or values pinned maps keep.
var layoutTypes = []string{
	"fd_layout", "fd_action", "fd_field", "fd_rec_flags",
	"fd_state", "fd_stamp", "fd_conf", "fd_bm", "fd_rule_rec", "fd_v6_ent", "fd_v4_sparse", "counter",
	"fd_cap_layout", "fd_cap_ctl", "fd_cap_sel", "fd_cap_cnt", "fd_cap_rec", "fd_cap_cpu",
	"fd_police", "fd_pcnt", "fd_src_key", "fd_ban", "fd_src_ent", "fd_src_set",
}

// layoutFingerprint describes layoutTypes from the object's BTF (names,
// sizes, member offsets, enum values) and hashes the description.
func layoutFingerprint(t *testing.T) (string, string) {
	spec, err := gen.LoadFastdrop()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, name := range layoutTypes {
		var st *btf.Struct
		var en *btf.Enum
		var typ btf.Type
		if spec.Types.TypeByName(name, &st) == nil {
			typ = st
		} else if err := spec.Types.TypeByName(name, &en); err == nil {
			typ = en
		} else {
			t.Fatalf("BTF: no struct or enum %s: %v", name, err)
		}
		switch typ := typ.(type) {
		case *btf.Struct:
			fmt.Fprintf(&b, "struct %s %d\n", typ.Name, typ.Size)
			for _, m := range typ.Members {
				size, err := btf.Sizeof(m.Type)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&b, "\t%s @%d %d\n", m.Name, m.Offset.Bytes(), size)
			}
		case *btf.Enum:
			fmt.Fprintf(&b, "enum %s %d\n", typ.Name, typ.Size)
			for _, v := range typ.Values {
				if v.Name == "FD_LAYOUT_VERSION" { // what the hash is for
					continue
				}
				fmt.Fprintf(&b, "\t%s = %d\n", v.Name, v.Value)
			}
		default:
			t.Fatalf("BTF type %s is a %T", name, typ)
		}
	}
	return fmt.Sprintf("%x", sha256.Sum256([]byte(b.String())))[:16], b.String()
}

// TestLayoutVersion: the layout of what pinned maps keep changes only
// together with FD_LAYOUT_VERSION.
func TestLayoutVersion(t *testing.T) {
	got, desc := layoutFingerprint(t)
	v := uint32(gen.FastdropFdLayoutFD_LAYOUT_VERSION)
	want, ok := layoutFingerprints[v]
	if !ok || got != want {
		t.Errorf("the layout of the pinned maps (bpf/fastdrop.h) is %s, and layout %d was %q: "+
			"if it changed, raise FD_LAYOUT_VERSION in bpf/fastdrop.h and add %d: %q to layoutFingerprints; "+
			"never change an existing entry.\nThe layout:\n%s", got, v, want, v+1, got, desc)
	}
}

// TestFeatures checks fd_conf.features (confFor's features): each feature
// of a rule set that the program's plain path lacks sets its bit, and a
// rule set with none gets 0, which sends its frames down the plain path.
func TestFeatures(t *testing.T) {
	plain := gen.FastdropFdConf{
		Fields:    1<<gen.FastdropFdFieldFD_FLD_DPORT | 1<<gen.FastdropFdFieldFD_FLD_SRC6,
		Ncompound: 2,
		LateFrom:  2,
		V4Count:   10,
	}
	plain.Crule[0], plain.Crule[1] = mkVal(ActionDrop, 20), mkVal(ActionRedirect, 21)
	for _, tc := range []struct {
		name string
		mod  func(c *gen.FastdropFdConf)
		want gen.FastdropFdLayout
	}{
		{"plain", func(c *gen.FastdropFdConf) {}, 0},
		{"ttl", func(c *gen.FastdropFdConf) { c.Fields |= 1 << gen.FastdropFdFieldFD_FLD_TTL }, gen.FastdropFdLayoutFD_FEAT_FIELDS},
		{"queue", func(c *gen.FastdropFdConf) { c.Fields |= 1 << gen.FastdropFdFieldFD_FLD_QUEUE }, gen.FastdropFdLayoutFD_FEAT_FIELDS},
		{"limit", func(c *gen.FastdropFdConf) { c.Crule[1] = actLimitVal | 3 }, gen.FastdropFdLayoutFD_FEAT_LIMIT},
		{"limit past ncompound", func(c *gen.FastdropFdConf) { c.Crule[2] = actLimitVal | 3 }, 0},
		{"ban4", func(c *gen.FastdropFdConf) { c.Ban4 = 24 }, gen.FastdropFdLayoutFD_FEAT_BANS},
		{"ban6", func(c *gen.FastdropFdConf) { c.Ban6 = 64 }, gen.FastdropFdLayoutFD_FEAT_BANS},
		{"late", func(c *gen.FastdropFdConf) { c.LateFrom = 1 }, gen.FastdropFdLayoutFD_FEAT_LATE},
		{"late, IPv6 prefixes", func(c *gen.FastdropFdConf) { c.LateFrom, c.V4Count, c.V6Count = 1, 0, 3 }, gen.FastdropFdLayoutFD_FEAT_LATE},
		{"late, no prefix rules", func(c *gen.FastdropFdConf) { c.LateFrom, c.V4Count = 1, 0 }, 0},
	} {
		c := plain
		tc.mod(&c)
		if got := features(&c); got != uint32(tc.want) {
			t.Errorf("%s: features %#x, want %#x", tc.name, got, tc.want)
		}
	}
}

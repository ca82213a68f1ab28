package fastdrop

import (
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf/btf"

	"github.com/xdpdrop/xdpdrop/gen"
)

// TestMatchFields walks the table of match fields: every field parses,
// prints and round-trips (String, then Parse, gives the same Rule) in its
// examples, each of which sets the field; the keywords and canonical
// positions are distinct; and the field lists in messages, which the CLI
// tests and users see, are what they were.
func TestMatchFields(t *testing.T) {
	keywords := map[string]string{}
	positions := map[int]string{}
	for i := range matchFields {
		f := &matchFields[i]
		for _, kw := range append([]string{f.name}, f.aliases...) {
			if f.sub {
				break // another entry's keyword
			}
			if other, ok := keywords[kw]; ok {
				t.Errorf("keyword %q is of both %s and %s", kw, other, f.name)
			}
			keywords[kw] = f.name
			if fieldByKeyword(kw) != i {
				t.Errorf("fieldByKeyword(%q) = %d, want %d", kw, fieldByKeyword(kw), i)
			}
		}
		if other, ok := positions[f.textPos]; ok || f.textPos < 0 || f.textPos >= len(matchFields) {
			t.Errorf("%s: textPos %d out of range or also %s's", f.name, f.textPos, other)
		}
		positions[f.textPos] = f.name
		if f.parse == nil || f.text == nil || f.match == nil || f.store == 0 || (!f.flag && f.need == "") {
			t.Errorf("%s: entry incomplete: %+v", f.name, *f)
		}
		if len(f.examples) == 0 {
			t.Errorf("%s: no examples", f.name)
		}
		for _, ex := range f.examples {
			rs, err := Parse(strings.NewReader(ex), "ex")
			if err != nil {
				t.Errorf("%s: example %q: %v", f.name, ex, err)
				continue
			}
			r := rs.Rules[0]
			if !f.isSet(&r) {
				t.Errorf("%s: example %q does not set the field: %+v", f.name, ex, r)
			}
			if got := r.String(); got != ex {
				t.Errorf("%s: example %q prints as %q (examples are canonical)", f.name, ex, got)
			}
			if !strings.Contains(" "+r.String()+" ", " "+f.text(&r)+" ") {
				t.Errorf("%s: %q does not contain the field's text %q", f.name, r.String(), f.text(&r))
			}
			back, err := Parse(strings.NewReader(r.String()), "back")
			if err != nil {
				t.Errorf("%s: %q does not parse back: %v", f.name, r.String(), err)
				continue
			}
			b := back.Rules[0]
			if !reflect.DeepEqual(b, r) {
				t.Errorf("%s: %q parses back as %+v, want %+v", f.name, r.String(), b, r)
			}
			if r.IsPrefixOnly() != (ex == "drop src 192.0.2.0/24" || ex == "drop dst 192.0.2.0/24") {
				t.Errorf("%s: %q: IsPrefixOnly %v", f.name, ex, r.IsPrefixOnly())
			}
		}
	}
	if got, want := wantFieldsText(), "want src, dst, proto, sport, dport, ether, frag, ttl, flags, queue, dscp, type, code, len, port, flowlabel, or tcp, udp, icmp, icmpv6"; got != want {
		t.Errorf("wantFieldsText() = %q, want %q", got, want)
	}
	if got, want := ipFieldList(), "src, dst, proto, sport, dport, frag, ttl, flags, dscp, type, code, len, port or flowlabel"; got != want {
		t.Errorf("ipFieldList() = %q, want %q", got, want)
	}
}

// TestDirectFields: the direct fields of matchFields are those of
// FD_DIRECT_FIELDS in bpf/fastdrop.h, by name, with the same enum fd_field
// value, table offset and width, as the object's BTF has them.
func TestDirectFields(t *testing.T) {
	spec, err := gen.LoadFastdrop()
	if err != nil {
		t.Fatal(err)
	}
	enum := func(name string) map[string]int {
		var en *btf.Enum
		if err := spec.Types.TypeByName(name, &en); err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, v := range en.Values {
			m[v.Name] = int(v.Value)
		}
		return m
	}
	dirs, flds := enum("fd_direct"), enum("fd_field")
	seen := map[string]bool{}
	for i := range matchFields {
		f := &matchFields[i]
		d := f.direct
		if d == nil {
			continue
		}
		name := strings.ToUpper(f.name)
		seen[name] = true
		start, ok := dirs["FD_DIR_"+name]
		end := dirs["FD_DIR_"+name+"_END"]
		if !ok || start != d.off || end-start+1 != 1<<d.bits {
			t.Errorf("%s: FD_DIR_%s is %d..%d, the table says %d entries at %d", f.name, name, start, end, 1<<d.bits, d.off)
		}
		if v, ok := flds["FD_FLD_"+name]; !ok || v != d.fld {
			t.Errorf("%s: FD_FLD_%s is %d (%v), the table says %d", f.name, name, v, ok, d.fld)
		}
		if directFieldOf(d.fld) != d || d.spans == nil {
			t.Errorf("%s: directFieldOf(%d) is not its entry, or no spans", f.name, d.fld)
		}
	}
	for n := range dirs {
		if name, ok := strings.CutPrefix(n, "FD_DIR_"); ok && !strings.HasSuffix(name, "_END") && name != "END" && !seen[name] {
			t.Errorf("FD_DIRECT_FIELDS has %s, matchFields has no direct field of that name", name)
		}
	}
}

// TestRuleSize: a Rule is copied per rule of million-rule sets, so its
// size is peak memory (TestCLIDropMemory in tests/): each 8 bytes more
// cost about 25 MiB replacing 1M prefixes. New fields fill padding
// (FragBits) or go behind a pointer that only rules with them pay for:
// the numeric fields are all in Rule.Nums (192 bytes before it, 144 since).
func TestRuleSize(t *testing.T) {
	if got := unsafe.Sizeof(Rule{}); got > 144 {
		t.Errorf("Rule is %d bytes, was 144: put the new field in Nums or behind a pointer", got)
	}
}

package fastdrop

import (
	"reflect"
	"strings"
	"testing"
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
			if r.IsPrefixOnly() != (ex == "drop src 192.0.2.0/24") {
				t.Errorf("%s: %q: IsPrefixOnly %v", f.name, ex, r.IsPrefixOnly())
			}
		}
	}
	if got, want := wantFieldsText(), "want src, dst, proto, sport, dport, ether, frag, queue, or tcp, udp, icmp, icmpv6"; got != want {
		t.Errorf("wantFieldsText() = %q, want %q", got, want)
	}
	if got, want := ipFieldList(), "src, dst, proto, sport, dport or frag"; got != want {
		t.Errorf("ipFieldList() = %q, want %q", got, want)
	}
}

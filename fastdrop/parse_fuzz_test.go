package fastdrop

import (
	"reflect"
	"strings"
	"testing"
)

// FuzzParse: the parser never panics; every rule it accepts is valid, and
// a rule set printed rule by rule parses back to the same rule set.
//
//	go test -run XXX -fuzz FuzzParse ./fastdrop
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"drop udp src 192.0.2.0/24 dport 11211",
		"policy drop\nmalformed drop\npass src 10.0.0.0/8 # ok\n",
		"drop ether ipv4 udp src 10.0.0.0/8 sport 53 dst 192.0.2.0/24 dport 1-1024",
		"pass tcp dst 2001:db8::1 sport 1000-2000\r\ndrop frag",
		"redirect proto 132 dst 192.0.2.0/24\ndrop ether 0x88e5\ndrop icmpv6 src ::/0",
		"drop src 10.0.0.0/8\ndrop src 10.0.0.0/8",
		"drop src ::ffff:1.2.3.4",
		"drop\tsrc\t1.2.3.4#x\n\n#\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		rs, err := Parse(strings.NewReader(text), "fuzz")
		if err != nil {
			if _, ok := err.(*ParseError); !ok {
				t.Fatalf("error %v is %T, not *ParseError", err, err)
			}
			return
		}
		if err := rs.Validate(); err != nil {
			t.Fatalf("accepted %q, but Validate: %v", text, err)
		}
		var b strings.Builder
		b.WriteString("policy " + rs.Policy.String() + "\nmalformed " + rs.Malformed.String() + "\n")
		for _, r := range rs.Rules {
			b.WriteString(r.String() + "\n")
		}
		again, err := Parse(strings.NewReader(b.String()), "canonical")
		if err != nil {
			t.Fatalf("%q parsed, but its canonical form %q does not: %v", text, b.String(), err)
		}
		if len(again.Rules) != len(rs.Rules) || again.Policy != rs.Policy || again.Malformed != rs.Malformed {
			t.Fatalf("canonical form %q parsed to %+v, want %+v", b.String(), again, rs)
		}
		for i := range rs.Rules {
			want := rs.Rules[i]
			want.Line = i + 3
			want.Text = "" // the canonical form is not kept as written
			if !reflect.DeepEqual(again.Rules[i], want) {
				t.Fatalf("rule %q reparsed as %q", rs.Rules[i], again.Rules[i])
			}
			// As written, it parses to the same rule, kept as written.
			w := rs.Rules[i].Written()
			one, err := Parse(strings.NewReader(w), "written")
			if err != nil || len(one.Rules) != 1 || one.Rules[0].String() != rs.Rules[i].String() || one.Rules[0].Written() != w {
				t.Fatalf("rule %q as written, %q, parses to %v (%v)", rs.Rules[i], w, one, err)
			}
		}
	})
}

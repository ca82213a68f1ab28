package fastdrop

import (
	"strings"
	"testing"
	"time"
)

// TestLimitParse: the lines parse, mean what they say and print
// back in canonical form; bad ones are refused with what to write.
func TestLimitParse(t *testing.T) {
	for _, tc := range []struct {
		line, canon string
		want        Limit
	}{
		{"limit 1000/s udp dport 53", "limit 1000/s udp dport 53", Limit{Rate: 1000}},
		{"limit 100mbit/s udp sport 123", "limit 100mbit/s udp sport 123", Limit{Rate: 100e6, Unit: UnitBits}},
		{"limit 50/s per src tcp dport 443", "limit 50/s per src tcp dport 443", Limit{Rate: 50, PerSrc: true}},
		{"limit 50/s per src tcp flags syn dport 443", "limit 50/s per src tcp flags syn dport 443", Limit{Rate: 50, PerSrc: true}},
		{"limit 10k/s per src/24 udp", "limit 10000/s per src/24 udp", Limit{Rate: 10000, PerSrc: true, Src4Len: 24}},
		{"limit 200/s burst 400 per src ban 60s icmp", "limit 200/s burst 400 per src ban 1m icmp", Limit{Rate: 200, Burst: 400, PerSrc: true, Ban: time.Minute}},
		{"limit 2mbyte/s burst 64kbyte udp", "limit 2mbyte/s burst 64kbyte udp", Limit{Rate: 2e6, Unit: UnitBytes, Burst: 64000}},
		{"limit 5/s per src/48 src 2001:db8::/32", "limit 5/s per src/48 src 2001:db8::/32", Limit{Rate: 5, PerSrc: true, Src6Len: 48}},
		{"limit 5/s udp per src/24/64 ban 1500ms", "limit 5/s per src/24/64 ban 1500ms udp", Limit{Rate: 5, PerSrc: true, Src4Len: 24, Src6Len: 64, Ban: 1500 * time.Millisecond}},
	} {
		rs, err := Parse(strings.NewReader(tc.line), "t")
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		r := rs.Rules[0]
		if r.Action != ActionLimit || r.Limit == nil || *r.Limit != tc.want || r.IsPrefixOnly() {
			t.Errorf("%q: %+v %+v", tc.line, r, r.Limit)
		}
		if r.String() != tc.canon {
			t.Errorf("%q prints as %q, want %q", tc.line, r.String(), tc.canon)
		}
		back, err := Parse(strings.NewReader(r.String()), "t")
		if err != nil || back.Rules[0].String() != tc.canon {
			t.Errorf("%q: canonical form does not parse back: %v", tc.canon, err)
		}
	}
	for _, tc := range []struct{ line, want string }{
		{"limit udp", "limit needs a rate first"},
		{"limit 10 udp", "want a rate like 1000/s"},
		{"limit 0/s udp", "never lets anything through"},
		{"limit 10/s ban 1m udp", "ban needs per src"},
		{"limit 10/s per dst udp", "want per src"},
		{"limit 10/s per src/33 udp", "an IPv4 prefix is at most /32"},
		{"limit 10/s burst 4kbyte udp", "the rate counts frames"},
		{"limit 100bit/s udp", "below 1kbit/s"},
		{"policy limit", "unknown policy"},
		{"limit 10/s burst 1 burst 2 udp", "burst given twice"},
	} {
		_, err := Parse(strings.NewReader(tc.line), "t")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.line, err, tc.want)
		}
	}
}

// TestLimitModel: the model says which rule decides; a limit rule's
// verdict is a fresh bucket's first frame's, pass.
func TestLimitModel(t *testing.T) {
	rs, err := Parse(strings.NewReader("limit 10/s udp dport 53\ndrop udp\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel(rs)
	f := func(dport uint16) []byte {
		b := make([]byte, 42)
		b[12], b[13] = 0x08, 0x00
		b[14], b[16], b[17], b[22], b[23] = 0x45, 0, 28, 64, ProtoUDP
		b[36], b[37] = byte(dport>>8), byte(dport)
		b[38], b[39] = 0, 8
		return b
	}
	if got := m.Eval(f(53)); got != (Result{Verdict: ActionPass, Class: ClassCompound, Rule: 0}) {
		t.Errorf("limit rule: %+v", got)
	}
	if got := m.Eval(f(54)); got != (Result{Verdict: ActionDrop, Class: ClassCompound, Rule: 1}) {
		t.Errorf("next rule: %+v", got)
	}
}

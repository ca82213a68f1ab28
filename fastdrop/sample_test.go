package fastdrop

import (
	"strings"
	"testing"
)

// TestSampleModifier: "sample 1/N" parses after the match fields, prints
// back, survives the rule record, changes no verdict, and bad forms are
// refused with a message that says what to write.
func TestSampleModifier(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"drop udp dport 11211 sample 1/1000", "drop udp dport 11211 sample 1/1000"},
		{"drop src 192.0.2.0/24 sample 1/1", "drop src 192.0.2.0/24 sample 1/1"},
		{"pass sample 1/7", "pass sample 1/7"},
	} {
		rs, err := Parse(strings.NewReader(tc.in+"\n"), "t")
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		r := rs.Rules[0]
		if got := r.String(); got != tc.want {
			t.Errorf("%s: String %q, want %q", tc.in, got, tc.want)
		}
		var b [recSize]byte
		encodeRecord(b[:], &r, 1, 2, 0)
		back, _, _, _, _ := decodeRecord(b[:])
		if back.Sample != r.Sample || back.String() != r.String() {
			t.Errorf("%s: record gives back %q (sample %d)", tc.in, back.String(), back.Sample)
		}
	}
	rs, err := Parse(strings.NewReader("drop src 192.0.2.0/24 sample 1/10\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	if !rs.Rules[0].IsPrefixOnly() {
		t.Error("a prefix rule with a sample modifier stays a prefix rule (longest prefix wins)")
	}
	m := NewModel(rs)
	if r := m.Eval(frameTo("192.0.2.7")); r.Verdict != ActionDrop || r.Rule != 0 {
		t.Errorf("verdict %v rule %d", r.Verdict, r.Rule)
	}
	for _, tc := range []struct{ in, want string }{
		{"drop udp sample", "sample needs a rate: 1/N, e.g. sample 1/1000"},
		{"drop udp sample 0", `sample "0": a rate: 1/N`},
		{"drop udp sample 2/3", `sample "2/3": a rate: 1/N`},
		{"drop udp sample 1/0", `sample "1/0": N in 1/N must be a whole number from 1 to 1073741824`},
		{"drop udp sample 1/10 sample 1/5", "sample given twice"},
		{"drop sample 1/10 udp", `unexpected "udp" after sample: the sample modifier comes last`},
	} {
		_, err := Parse(strings.NewReader(tc.in+"\n"), "t")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
		}
	}
}

// frameTo is a UDP frame to port 53 from src.
func frameTo(src string) []byte {
	b := make([]byte, 14+20+8)
	b[12], b[13] = 0x08, 0x00
	ip := b[14:]
	ip[0], ip[3], ip[8], ip[9] = 0x45, 28, 64, 17
	copy(ip[12:16], parseV4(src))
	copy(ip[16:20], []byte{198, 51, 100, 1})
	udp := ip[20:]
	udp[3], udp[5] = 53, 8
	return b
}

func parseV4(s string) []byte {
	var out []byte
	for _, p := range strings.Split(s, ".") {
		n := 0
		for _, c := range p {
			n = n*10 + int(c-'0')
		}
		out = append(out, byte(n))
	}
	return out
}

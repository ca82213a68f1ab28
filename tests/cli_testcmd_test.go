package tests

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/internal/frames"
)

// captureFrames is a small capture with one frame per outcome.
func captureFrames() [][]byte {
	return [][]byte{
		frames.UDP4("192.0.2.1", "198.18.0.1", 11211, 11211, 18).Bytes,            // 1: drop udp dport 11211
		frames.TCP4("203.0.113.9", "198.18.0.1", 40000, 443, 0).Bytes,             // 2: drop src 203.0.113.0/24
		frames.TCP4("203.0.113.7", "198.18.0.1", 40000, 443, 0).Bytes,             // 3: pass src 203.0.113.7 (longer prefix)
		frames.UDP6("2001:db8::1", "2001:db8::2", 5353, 53, 18).Bytes,             // 4: default policy
		frames.UDP4("192.0.2.1", "198.18.0.1", 1, 53, 18).CorruptIPv4IHL(3).Bytes, // 5: malformed
		make([]byte, 10), // 6: a runt: malformed (docs/RULES.md: shorter than 14 bytes)
	}
}

const captureRules = "policy pass\ndrop udp dport 11211\ndrop src 203.0.113.0/24\npass src 203.0.113.7\n"

func writeCapture(t *testing.T, ng bool) string {
	t.Helper()
	name := "cap.pcap"
	if ng {
		name = "cap.pcapng"
	}
	p := filepath.Join(t.TempDir(), name)
	f, err := os.Create(p)
	require.NoError(t, err)
	defer f.Close()
	ts := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	var write func(gopacket.CaptureInfo, []byte) error
	if ng {
		w, err := pcapgo.NewNgWriter(f, layers.LinkTypeEthernet)
		require.NoError(t, err)
		defer func() { require.NoError(t, w.Flush()) }()
		write = w.WritePacket
	} else {
		w := pcapgo.NewWriter(f)
		require.NoError(t, w.WriteFileHeader(65535, layers.LinkTypeEthernet))
		write = w.WritePacket
	}
	for i, b := range captureFrames() {
		ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(b), Length: len(b)}
		require.NoError(t, write(ci, b))
	}
	return p
}

// TestCLITestCapture runs a capture through the compiled rule set, in pcap
// and pcapng, and checks every frame's verdict and rule.
func TestCLITestCapture(t *testing.T) {
	rules := writeRules(t, captureRules)
	for _, ng := range []bool{false, true} {
		r := cli(t, "test", "--rules", rules, "--pcap", writeCapture(t, ng), "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var rep struct {
			Frames []struct {
				Index     int    `json:"index"`
				Length    int    `json:"length"`
				Verdict   string `json:"verdict"`
				Class     string `json:"class"`
				RuleIndex int    `json:"rule_index"`
				Rule      string `json:"rule"`
				Line      int    `json:"line"`
			} `json:"frames"`
			Summary struct {
				Frames, Dropped, Passed, Malformed, Default, Skipped int
				Rules                                                []struct {
					Index  int    `json:"index"`
					Rule   string `json:"rule"`
					Frames int    `json:"frames"`
				} `json:"rules"`
			} `json:"summary"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
		require.Len(t, rep.Frames, 6)
		want := []struct{ verdict, class, rule string }{
			{"drop", "compound", "drop udp dport 11211"},
			{"drop", "prefix", "drop src 203.0.113.0/24"},
			{"pass", "prefix", "pass src 203.0.113.7/32"},
			{"pass", "default", ""},
			{"pass", "malformed", ""},
			{"pass", "malformed", ""},
		}
		for i, w := range want {
			f := rep.Frames[i]
			require.Equal(t, i+1, f.Index)
			require.Equal(t, w.verdict, f.Verdict, "frame %d", i+1)
			require.Equal(t, w.class, f.Class, "frame %d", i+1)
			require.Equal(t, w.rule, f.Rule, "frame %d", i+1)
		}
		require.Equal(t, 2, rep.Frames[0].Line, "the rule's line in the file")
		require.Equal(t, 6, rep.Summary.Frames)
		require.Equal(t, 2, rep.Summary.Dropped)
		require.Equal(t, 4, rep.Summary.Passed)
		require.Equal(t, 2, rep.Summary.Malformed)
		require.Equal(t, 1, rep.Summary.Default)
		require.Equal(t, 0, rep.Summary.Skipped)
		require.Len(t, rep.Summary.Rules, 3)
		require.Equal(t, 1, rep.Summary.Rules[0].Frames)
	}

	// Text output: a line per frame and the summary.
	r := cli(t, "test", "--rules", rules, "--pcap", writeCapture(t, false))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "#1 drop udp dport 11211")
	require.Contains(t, r.stdout, "6 frames: 2 dropped, 4 passed (2 malformed, 1 by the default policy pass), 0 skipped")
	require.NotContains(t, r.stdout, "snap length", "nothing was cut")

	// A runt takes the rule set's malformed verdict, like any malformed frame.
	r = cli(t, "test", "--rules", writeRules(t, "malformed drop\n"), "--pcap", writeCapture(t, false), "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep struct {
		Frames []struct {
			Verdict string `json:"verdict"`
			Class   string `json:"class"`
		} `json:"frames"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Len(t, rep.Frames, 6)
	require.Equal(t, "drop", rep.Frames[5].Verdict)
	require.Equal(t, "malformed", rep.Frames[5].Class)
}

func TestCLITestBadInput(t *testing.T) {
	rules := writeRules(t, captureRules)
	r := cli(t, "test", "--rules", rules, "--pcap", "/nonexistent.pcap")
	requireOneLineError(t, r, 1, "/nonexistent.pcap")
	notPcap := writeRules(t, "this is not a capture")
	r = cli(t, "test", "--rules", rules, "--pcap", notPcap)
	requireOneLineError(t, r, 1, "not a pcap or pcapng file")
	bad := writeRules(t, "drop udp dport 99999\n")
	r = cli(t, "test", "--rules", bad, "--pcap", writeCapture(t, false))
	requireOneLineError(t, r, 1, "test.rules:1")
	r = cli(t, "test", "--rules", rules)
	requireOneLineError(t, r, 2, `required flag(s) "pcap" not set`)

	// A Linux cooked capture (tcpdump -i any) is refused with the fix.
	p := filepath.Join(t.TempDir(), "sll.pcap")
	f, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, pcapgo.NewWriter(f).WriteFileHeader(65535, layers.LinkTypeLinuxSLL))
	f.Close()
	r = cli(t, "test", "--rules", rules, "--pcap", p)
	requireOneLineError(t, r, 1, "want Ethernet")
}

// TestCLITestLists: xdpdrop test decides frames by rules with value lists,
// negated lists, comparisons and flow labels, and prints each rule exactly
// as written in the file (fields in the order written, not the canonical
// one; values, names and flags as written), in text and JSON.
func TestCLITestLists(t *testing.T) {
	text := "drop dport 53,123,161,1900,11211 udp\n" +
		"drop tcp dport !22,443 dst 192.0.2.0/24\n" +
		"drop proto tcp,udp len >=1000 ttl <3,255\n" +
		"pass flowlabel 0x12345,0x100-0x1ff udp\n" +
		"drop dport 80 tcp flags !ack,syn dscp ef\n" +
		"drop icmp code 0 type echo-request\n"
	rules := writeRules(t, text)
	fl := frames.Spec{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"), Proto: frames.ProtoUDP, SrcPort: 9, DstPort: 9, FlowLabel: 0x180}
	pcap := writePcapFrames(t, [][]byte{
		frames.UDP4("10.0.0.1", "10.0.0.2", 9, 1900, 18).Bytes, // rule 1
		frames.TCP4("10.0.0.1", "192.0.2.1", 9, 80, 0).Bytes,   // rule 2
		frames.TCP4("10.0.0.1", "192.0.2.1", 9, 443, 0).Bytes,  // default
		fl.Build().Bytes, // rule 4
	})
	r := cli(t, "test", "--rules", rules, "--pcap", pcap, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep struct {
		Frames []struct {
			Verdict string `json:"verdict"`
			Rule    string `json:"rule"`
		} `json:"frames"`
		Summary struct {
			Rules []struct {
				Rule string `json:"rule"`
			} `json:"rules"`
		} `json:"summary"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	want := []struct{ verdict, rule string }{{"drop", lines[0]}, {"drop", lines[1]}, {"pass", ""}, {"pass", lines[3]}}
	require.Len(t, rep.Frames, len(want))
	for i, w := range want {
		require.Equal(t, w.verdict, rep.Frames[i].Verdict, "frame %d", i+1)
		require.Equal(t, w.rule, rep.Frames[i].Rule, "frame %d", i+1)
	}
	for _, rr := range rep.Summary.Rules {
		require.Contains(t, lines, rr.Rule, "summary rules print as written")
	}
	r = cli(t, "test", "--rules", rules, "--pcap", pcap)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "drop tcp dport !22,443 dst 192.0.2.0/24")
	require.Contains(t, r.stdout, "pass flowlabel 0x12345,0x100-0x1ff udp")

	// Nonsense is refused with the file's line and what to write.
	for _, tc := range []struct{ rule, want string }{
		{"drop udp dport 53,,123\n", "test.rules:1: dport 53,,123: empty item in the list"},
		{"drop flowlabel 5 src 10.0.0.0/8\n", "test.rules:1: flowlabel is IPv6's"},
		{"drop udp type 3\n", `test.rules:1: type needs protocol icmp or icmpv6 (write e.g. "icmp type 3")`},
		{"drop udp flags syn\n", "test.rules:1: flags needs protocol tcp"},
		{"drop dscp 64\n", "test.rules:1: dscp 64: 64 is not a codepoint"},
		{"drop len >70000\n", "test.rules:1: len >70000: 70000 is not a length 0-65535"},
	} {
		r := cli(t, "test", "--rules", writeRules(t, tc.rule), "--pcap", pcap)
		require.NotEqual(t, 0, r.code, tc.rule)
		require.Contains(t, r.stderr, tc.want, tc.rule)
	}
}

// writePcapFrames writes frames to a pcap file and returns its path.
func writePcapFrames(t *testing.T, fs [][]byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "frames.pcap")
	f, err := os.Create(p)
	require.NoError(t, err)
	defer f.Close()
	w := pcapgo.NewWriter(f)
	require.NoError(t, w.WriteFileHeader(65535, layers.LinkTypeEthernet))
	ts := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	for i, b := range fs {
		require.NoError(t, w.WritePacket(gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(b), Length: len(b)}, b))
	}
	return p
}

package tests

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// Captures as operators make them: with a snap length, with interfaces of
// several link types, empty; written with pcapgo, and one made by tcpdump.

// jsonTestReport is `xdpdrop test --json` as a user's script reads it.
type jsonTestReport struct {
	Frames []struct {
		Index     int    `json:"index"`
		Length    int    `json:"length"`
		Captured  int    `json:"captured_length"`
		Verdict   string `json:"verdict"`
		Class     string `json:"class"`
		Rule      string `json:"rule"`
		RuleIndex int    `json:"rule_index"`
		Error     string `json:"error"`
	} `json:"frames"`
	Summary struct {
		Frames, Dropped, Passed, Malformed, Default, Skipped int
		Cut                                                  int `json:"cut"`
		CutHeaders                                           int `json:"cut_in_headers"`
		NotEthernet                                          int `json:"not_ethernet"`
	} `json:"summary"`
}

func testJSON(t *testing.T, rules, capture string) jsonTestReport {
	t.Helper()
	r := cli(t, "test", "--rules", rules, "--pcap", capture, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep jsonTestReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	return rep
}

// snapFrames are whole frames and what a capture with snap length 96 keeps.
func snapFrames() [][]byte {
	deep := frames.Spec{ // its TCP header starts at byte 118: cut inside the headers
		Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"),
		IPv6Ext: []frames.ExtHeader{{Type: frames.ProtoHopByHop, Len: 64}},
		Proto:   frames.ProtoTCP, SrcPort: 40000, DstPort: 22, Payload: frames.Pattern(1000),
	}.Build()
	return [][]byte{
		frames.UDP4("192.0.2.1", "198.18.0.1", 11211, 11211, 1472).Bytes,        // 1: 1514 B, drop udp dport 11211
		frames.TCP4("203.0.113.9", "198.18.0.1", 40000, 443, 1460).Bytes,        // 2: 1514 B, drop src 203.0.113.0/24
		frames.UDP6("2001:db8::1", "2001:db8::2", 5353, 53, 9000-14-40-8).Bytes, // 3: 9000 B, default policy
		frames.UDP4("192.0.2.1", "198.18.0.1", 1, 53, 18).Bytes,                 // 4: 60 B, not cut, default
		deep.Bytes, // 5: skipped, cut inside its headers
		frames.UDP4("192.0.2.1", "198.18.0.1", 1, 53, 1472).CorruptIPv4TotalLen(1600).Bytes, // 6: malformed at its length too
	}
}

// writeSnapCapture writes frames as a capture with snap length snap: the
// records keep the first snap bytes and the length on the wire.
func writeSnapCapture(t *testing.T, ng bool, snap int, fs [][]byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "snap.pcap")
	f, err := os.Create(p)
	require.NoError(t, err)
	defer f.Close()
	var write func(gopacket.CaptureInfo, []byte) error
	if ng {
		w, err := pcapgo.NewNgWriterInterface(f, pcapgo.NgInterface{Name: "eth3", LinkType: layers.LinkTypeEthernet, SnapLength: uint32(snap)}, pcapgo.DefaultNgWriterOptions)
		require.NoError(t, err)
		defer func() { require.NoError(t, w.Flush()) }()
		write = w.WritePacket
	} else {
		w := pcapgo.NewWriter(f)
		require.NoError(t, w.WriteFileHeader(uint32(snap), layers.LinkTypeEthernet))
		write = w.WritePacket
	}
	ts := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	for i, b := range fs {
		c := b[:min(len(b), snap)]
		require.NoError(t, write(gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(c), Length: len(b)}, c))
	}
	return p
}

// TestCLITestSnapLength: a capture made with a snap length (tcpdump -s 96)
// has its frames judged at their length on the wire, as the attached
// program judges them, not as malformed; a frame cut inside its headers is
// skipped; the summary says how many were cut and how they were treated.
func TestCLITestSnapLength(t *testing.T) {
	rules := writeRules(t, captureRules)
	for _, ng := range []bool{false, true} {
		p := writeSnapCapture(t, ng, 96, snapFrames())
		rep := testJSON(t, rules, p)
		require.Len(t, rep.Frames, 6)
		want := []struct {
			length, captured int
			verdict, class   string
			rule             string
		}{
			{1514, 96, "drop", "compound", "drop udp dport 11211"},
			{1514, 96, "drop", "prefix", "drop src 203.0.113.0/24"},
			{9000, 96, "pass", "default", ""},
			{60, 0, "pass", "default", ""},
			{1138, 96, "", "skipped", ""},
			{1514, 96, "pass", "malformed", ""},
		}
		for i, w := range want {
			f := rep.Frames[i]
			require.Equal(t, i+1, f.Index)
			require.Equal(t, w.length, f.Length, "frame %d: the length on the wire", i+1)
			require.Equal(t, w.captured, f.Captured, "frame %d", i+1)
			require.Equal(t, w.verdict, f.Verdict, "frame %d", i+1)
			require.Equal(t, w.class, f.Class, "frame %d", i+1)
			require.Equal(t, w.rule, f.Rule, "frame %d", i+1)
		}
		require.Contains(t, rep.Frames[4].Error, "96 of 1138 bytes captured, the headers need 138: cut inside its headers")
		s := rep.Summary
		require.Equal(t, 6, s.Frames)
		require.Equal(t, 5, s.Cut)
		require.Equal(t, 1, s.CutHeaders)
		require.Equal(t, 1, s.Skipped)
		require.Equal(t, 1, s.Malformed, "only the frame whose total length is wrong")
		require.Equal(t, 2, s.Dropped)
	}

	r := cli(t, "test", "--rules", rules, "--pcap", writeSnapCapture(t, false, 96, snapFrames()))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "1514 (96 captured)")
	require.Contains(t, r.stdout, "6 frames: 2 dropped, 3 passed (1 malformed, 2 by the default policy pass), 1 skipped")
	require.Contains(t, r.stdout, "5 frames were cut short by the capture's snap length: 4 judged at their length on the wire (headers all captured, the rest filled with zeros), 1 skipped (cut inside their headers)")

	// A snap length shorter than the Ethernet header leaves no frame to judge.
	rep := testJSON(t, rules, writeSnapCapture(t, false, 10, snapFrames()[:1]))
	require.Equal(t, "skipped", rep.Frames[0].Class)
	require.Equal(t, 1, rep.Summary.CutHeaders)
}

// TestCLITestSnapLengthTcpdump checks the capture written above against
// tcpdump's reading of it, then runs a capture that tcpdump itself made
// with -s 96 on a veth.
func TestCLITestSnapLengthTcpdump(t *testing.T) {
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		testenv.SkipOrFail(t, "tcpdump is not installed (scripts/setup.sh installs it)")
	}
	// tcpdump sees the same records, cut, with their lengths on the wire.
	p := writeSnapCapture(t, false, 96, snapFrames())
	out, err := exec.Command(tcpdump, "-r", p, "-nn", "-e").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.HasPrefix(l, "reading from file") {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 6, "%s", out)
	require.Contains(t, lines[0], "length 1514")
	require.Contains(t, lines[2], "length 9000")
	require.Contains(t, string(out), "snapshot length 96")

	// A real capture: tcpdump -s 96 on the host end of a veth while the
	// peer sends full-size frames.
	v := jumboSandbox(t)
	file := filepath.Join(t.TempDir(), "real.pcap")
	cmd := exec.Command(tcpdump, "-i", v.Name, "-s", "96", "-U", "-c", "3", "-w", file, "udp dst port 11211 or udp dst port 53")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "listening on") },
		10*time.Second, 10*time.Millisecond, "tcpdump never started: %s", &stderr)
	sendRaw(t, v, jumboUDP(t, v, 11211), jumboUDP(t, v, 53), jumboUDP(t, v, 11211))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("tcpdump did not capture 3 frames: %s", &stderr)
	}
	rep := testJSON(t, writeRules(t, captureRules), file)
	require.Len(t, rep.Frames, 3)
	for i, verdict := range []string{"drop", "pass", "drop"} {
		require.Equal(t, 9000, rep.Frames[i].Length)
		require.Equal(t, 96, rep.Frames[i].Captured)
		require.Equal(t, verdict, rep.Frames[i].Verdict, "frame %d", i+1)
	}
	require.Equal(t, 3, rep.Summary.Cut)
	require.Equal(t, 0, rep.Summary.Malformed)
}

// TestCLITestPcapngInterfaces: a pcapng with an Ethernet interface and one
// of another link type. The other interface's records are reported as
// skipped with their record numbers, and every frame keeps its record's
// number, as Wireshark shows it.
func TestCLITestPcapngInterfaces(t *testing.T) {
	p := filepath.Join(t.TempDir(), "mixed.pcapng")
	f, err := os.Create(p)
	require.NoError(t, err)
	w, err := pcapgo.NewNgWriterInterface(f, pcapgo.NgInterface{Name: "eth3", LinkType: layers.LinkTypeEthernet}, pcapgo.DefaultNgWriterOptions)
	require.NoError(t, err)
	sllIface, err := w.AddInterface(pcapgo.NgInterface{Name: "any", LinkType: layers.LinkTypeLinuxSLL})
	require.NoError(t, err)
	sll := append(make([]byte, 16), frames.UDP4("192.0.2.1", "198.18.0.1", 1, 11211, 18).Bytes[14:]...)
	ts := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	for i, rec := range []struct {
		iface int
		data  []byte
	}{
		{0, frames.UDP4("192.0.2.1", "198.18.0.1", 1, 11211, 18).Bytes}, // 1: drop
		{sllIface, sll}, // 2: skipped
		{0, frames.TCP4("203.0.113.7", "198.18.0.1", 40000, 443, 0).Bytes}, // 3: pass by the /32
		{sllIface, sll}, // 4: skipped
		{0, frames.UDP6("2001:db8::1", "2001:db8::2", 5353, 53, 18).Bytes}, // 5: default
	} {
		ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(rec.data), Length: len(rec.data), InterfaceIndex: rec.iface}
		require.NoError(t, w.WritePacket(ci, rec.data))
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())

	rules := writeRules(t, captureRules)
	rep := testJSON(t, rules, p)
	require.Len(t, rep.Frames, 5)
	want := []struct{ class, rule string }{
		{"compound", "drop udp dport 11211"},
		{"skipped", ""},
		{"prefix", "pass src 203.0.113.7/32"},
		{"skipped", ""},
		{"default", ""},
	}
	for i, w := range want {
		require.Equal(t, i+1, rep.Frames[i].Index, "numbered by record")
		require.Equal(t, w.class, rep.Frames[i].Class, "frame %d", i+1)
		require.Equal(t, w.rule, rep.Frames[i].Rule, "frame %d", i+1)
	}
	require.Equal(t, "not Ethernet: interface 1 (any) has link type Linux SLL", rep.Frames[1].Error)
	require.Equal(t, 2, rep.Summary.NotEthernet)
	require.Equal(t, 2, rep.Summary.Skipped)
	require.Equal(t, 5, rep.Summary.Frames)

	r := cli(t, "test", "--rules", rules, "--pcap", p)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "2 frames skipped as not Ethernet (the first at record 2: interface 1 (any) has link type Linux SLL)")
	require.Contains(t, r.stdout, "not Ethernet: interface 1 (any) has link type Linux SLL")

	// Only records that are not Ethernet: refused, as a pcap of -i any is.
	p = filepath.Join(t.TempDir(), "sll.pcapng")
	f, err = os.Create(p)
	require.NoError(t, err)
	w, err = pcapgo.NewNgWriterInterface(f, pcapgo.NgInterface{Name: "any", LinkType: layers.LinkTypeLinuxSLL}, pcapgo.DefaultNgWriterOptions)
	require.NoError(t, err)
	require.NoError(t, w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(sll), Length: len(sll)}, sll))
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())
	r = cli(t, "test", "--rules", rules, "--pcap", p)
	requireOneLineError(t, r, 1, "no Ethernet frame in it (record 1: interface 0 (any) has link type Linux SLL)")
	require.Contains(t, r.stderr, "want Ethernet")
}

// TestCLITestEmptyCapture: an empty capture gives an empty frames list in
// JSON, not none; --summary leaves the list out.
func TestCLITestEmptyCapture(t *testing.T) {
	rules := writeRules(t, captureRules)
	for _, ng := range []bool{false, true} {
		p := writeSnapCapture(t, ng, 65535, nil)
		r := cli(t, "test", "--rules", rules, "--pcap", p, "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var raw map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw), r.stdout)
		require.Equal(t, "[]", string(raw["frames"]), "ng %v: %s", ng, r.stdout)
		rep := testJSON(t, rules, p)
		require.Equal(t, 0, rep.Summary.Frames)

		r = cli(t, "test", "--rules", rules, "--pcap", p, "--json", "--summary")
		require.Equal(t, 0, r.code, r.stderr)
		raw = nil
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw), r.stdout)
		require.NotContains(t, raw, "frames")
		require.Contains(t, raw, "summary")
	}
}

// lockedBuffer collects a child's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

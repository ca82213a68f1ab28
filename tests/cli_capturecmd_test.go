package tests

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/capture"
	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
	"github.com/xdpdrop/xdpdrop/pcapng"
)

// startCapture starts `xdpdrop capture` and returns once it says it
// captures; its stdout goes to stdout (nil: a buffer, returned).
func startCapture(t *testing.T, stdout io.Writer, args ...string) (*exec.Cmd, *bytes.Buffer, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(xdpdropBin, append([]string{"capture"}, args...)...)
	return startCaptureCmd(t, cmd, stdout)
}

func startCaptureCmd(t *testing.T, cmd *exec.Cmd, stdout io.Writer) (*exec.Cmd, *bytes.Buffer, *lockedBuffer) {
	t.Helper()
	var out *bytes.Buffer
	if stdout == nil {
		out = &bytes.Buffer{}
		stdout = out
	}
	cmd.Stdout = stdout
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	stderr := &lockedBuffer{}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			stderr.Write([]byte(sc.Text() + "\n"))
			if !once && strings.HasPrefix(sc.Text(), "capturing on ") {
				once = true
				close(ready)
			}
		}
	}()
	t.Cleanup(func() { pw.Close() })
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatalf("capture never said it captures; stderr: %s", stderr.String())
	}
	return cmd, out, stderr
}

// stopCapture ends a capture with SIGTERM (nil: it ends by itself) and
// returns its summary numbers: seen, captured, lost.
func stopCapture(t *testing.T, cmd *exec.Cmd, stderr *lockedBuffer, sig os.Signal) (seen, captured, lost uint64) {
	t.Helper()
	if sig != nil {
		require.NoError(t, cmd.Process.Signal(sig))
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "capture exits 0; stderr: %s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("capture did not exit; stderr: %s", stderr.String())
	}
	time.Sleep(50 * time.Millisecond) // the last stderr line
	m := regexp.MustCompile(`(\d+) frames seen, (\d+) captured, (\d+) lost`).FindStringSubmatch(stderr.String())
	require.NotNil(t, m, "summary; stderr: %s", stderr.String())
	n := func(s string) uint64 { v, _ := strconv.ParseUint(s, 10, 64); return v }
	return n(m[1]), n(m[2]), n(m[3])
}

// registrations reads the capture slots in use on iface's fast drop.
func registrations(t *testing.T, iface string) uint32 {
	t.Helper()
	att, err := loader.Open(iface, loader.DefaultPinRoot)
	require.NoError(t, err)
	defer att.Close()
	m, err := ebpf.LoadPinnedMap(filepath.Join(att.MapsDir(), gen.FastdropMapFdMain), nil)
	require.NoError(t, err)
	defer m.Close()
	r, err := capture.Registrations(m)
	require.NoError(t, err)
	return r
}

// readPcapng reads every packet of a pcapng file with our reader.
func readPcapng(t *testing.T, path string) ([]pcapng.Interface, []pcapng.Packet) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r, err := pcapng.NewReader(f)
	require.NoError(t, err)
	var ps []pcapng.Packet
	for {
		p, err := r.Next()
		if err == io.EOF {
			return r.Interfaces(), ps
		}
		require.NoError(t, err)
		p.Data = append([]byte(nil), p.Data...)
		ps = append(ps, p)
	}
}

func tcpdump(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("tcpdump")
	if err != nil {
		testenv.SkipOrFail(t, "needs tcpdump (Debian package tcpdump, installed by .ci/run)")
	}
	return p
}

// TestCLICapture: three captures at once on a live veth, each getting
// what it asked for: every dropped frame as pcapng with verdict, rule
// (line and text), rx queue and CPU, which tcpdump and our reader read
// back; 1 in 10 of the frames matching a filter; a count of passed frames
// as lines. SIGTERM ends a capture and leaves no registration behind.
func TestCLICapture(t *testing.T) {
	td := tcpdump(t)
	v := sandboxForCLI(t)
	rules := writeRules(t, "policy pass\ndrop udp dport 11211\ndrop udp dport 19\n")
	r := cli(t, "drop", "--iface", v.Name, "--rules", rules, "--mode", "driver")
	require.Equal(t, 0, r.code, r.stderr)
	require.Zero(t, registrations(t, v.Name))

	dir := t.TempDir()
	drops, matched := filepath.Join(dir, "drops.pcapng"), filepath.Join(dir, "matched.pcapng")
	a, _, aErr := startCapture(t, nil, "--iface", v.Name, "--verdict", "drop", "-w", drops)
	b, _, bErr := startCapture(t, nil, "--iface", v.Name, "--match", "udp dport 19", "--sample", "1/10", "-w", matched)
	// The kernel's own IPv6 frames on the veth (MLD, ND) pass too: --match
	// keeps the test's.
	c, cOut, cErr := startCapture(t, nil, "--iface", v.Name, "--verdict", "pass", "--match", "udp dport 53", "--count", "10", "--snaplen", "64")
	require.Equal(t, 3, bits.OnesCount32(registrations(t, v.Name)), "three captures registered")

	send(t, v, "100", "11211")
	send(t, v, "50", "19")
	send(t, v, "30", "53")
	time.Sleep(500 * time.Millisecond) // the captures write what they read

	seen, captured, lost := stopCapture(t, c, cErr, nil) // --count 10: ends by itself
	require.Equal(t, uint64(10), captured)
	require.Zero(t, lost)
	require.GreaterOrEqual(t, seen, uint64(10))
	lines := strings.Split(strings.TrimSpace(cOut.String()), "\n")
	require.Len(t, lines, 10, cOut.String())
	for _, l := range lines {
		require.Regexp(t, `^\d\d:\d\d:\d\d\.\d{6} IP 198\.18\.0\.2\.\d+ > 198\.18\.0\.1\.53: UDP, length \d+, 64 bytes: pass by default, queue 0, cpu \d+$`, l)
	}

	seen, captured, lost = stopCapture(t, a, aErr, syscall.SIGTERM)
	require.Equal(t, [3]uint64{150, 150, 0}, [3]uint64{seen, captured, lost})
	_, _, _ = stopCapture(t, b, bErr, syscall.SIGINT)
	require.Zero(t, registrations(t, v.Name), "the captures removed their registrations")

	// Ours: verdict, rule, queue and CPU of every packet.
	ifs, ps := readPcapng(t, drops)
	require.Equal(t, []pcapng.Interface{{Name: v.Name, LinkType: pcapng.LinkEthernet, Snaplen: uint32(capture.MaxSnaplen), TsResol: 9}}, ifs)
	require.Len(t, ps, 150)
	comment := regexp.MustCompile(`^verdict=drop rule=(\d) rule_text="(drop udp dport \d+)" queue=0 cpu=\d+$`)
	byRule := map[string]int{}
	for _, p := range ps {
		require.Len(t, p.Comments, 1)
		m := comment.FindStringSubmatch(p.Comments[0])
		require.NotNil(t, m, p.Comments[0])
		byRule[m[1]+" "+m[2]]++
		require.True(t, p.HasQueue)
		require.Zero(t, p.Queue)
		require.Len(t, p.Verdicts, 1)
		act, ok := pcapng.XDPAction(p.Verdicts[0])
		require.True(t, ok)
		require.Equal(t, uint64(1), act, "XDP_DROP")
		require.Equal(t, 64, p.Length)
		require.Len(t, p.Data, 64, "whole frames")
	}
	require.Equal(t, map[string]int{"2 drop udp dport 11211": 100, "3 drop udp dport 19": 50}, byRule)

	// tcpdump: the same packets, byte for byte.
	out, err := exec.Command(td, "-r", drops, "-nn", "-xx").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, 100, strings.Count(string(out), "> 198.18.0.1.11211: UDP"), "%s", out)
	require.Equal(t, 50, strings.Count(string(out), "> 198.18.0.1.19: UDP"))
	require.Contains(t, testenv.TcpdumpHex(string(out)), hex.EncodeToString(ps[0].Data))

	_, ps = readPcapng(t, matched)
	require.Len(t, ps, 5, "1 in 10 of the 50 frames to port 19")
	for _, p := range ps {
		require.Contains(t, p.Comments[0], `rule=3 rule_text="drop udp dport 19"`)
	}
}

// TestCLICapturePipe: -w - piped into tcpdump -r -.
func TestCLICapturePipe(t *testing.T) {
	td := tcpdump(t)
	v := sandboxForCLI(t)
	r := cli(t, "drop", "--iface", v.Name, "--deny", "198.18.0.0/16", "--mode", "driver")
	require.Equal(t, 0, r.code, r.stderr)
	dump := exec.Command(td, "-r", "-", "-nn")
	var dumpOut bytes.Buffer
	dump.Stdout, dump.Stderr = &dumpOut, &dumpOut
	pipe, err := dump.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, dump.Start())
	capCmd, _, capErr := startCapture(t, pipe, "--iface", v.Name, "--count", "20", "-w", "-")
	send(t, v, "20", "7")
	_, captured, _ := stopCapture(t, capCmd, capErr, nil)
	require.Equal(t, uint64(20), captured)
	pipe.Close()
	require.NoError(t, dump.Wait(), dumpOut.String())
	require.Equal(t, 20, strings.Count(dumpOut.String(), "IP 198.18.0.2.1024 > 198.18.0.1.7: UDP, length 22"), dumpOut.String())
}

// TestCLICaptureFlood: every frame of a flood offered to one capture.
// The program never waits: what the ring cannot take is counted as lost,
// seen counts every frame, and every frame still got its verdict.
func TestCLICaptureFlood(t *testing.T) {
	v := sandboxForCLI(t)
	r := cli(t, "drop", "--iface", v.Name, "--deny", "198.18.0.0/16", "--mode", "driver")
	require.Equal(t, 0, r.code, r.stderr)
	out := filepath.Join(t.TempDir(), "flood.pcapng")
	c, _, cErr := startCapture(t, nil, "--iface", v.Name, "--verdict", "drop", "-w", out)
	const n = 300000
	send(t, v, strconv.Itoa(n), "9")
	time.Sleep(time.Second)
	seen, captured, lost := stopCapture(t, c, cErr, syscall.SIGTERM)
	require.Equal(t, uint64(n), seen)
	require.LessOrEqual(t, captured+lost, seen)
	require.Positive(t, captured)
	t.Logf("flood of %d frames: %d captured, %d lost", n, captured, lost)
	require.Equal(t, uint64(n), statsJSON(t, v.Name).verdict("drop"), "every frame dropped, capture or not")
	_, ps := readPcapng(t, out)
	require.Len(t, ps, int(captured))
	require.Zero(t, registrations(t, v.Name))
}

// TestCLICaptureBadInput: each mistake is a one-line error that names
// only real flags and commands, and leaves no registration behind.
func TestCLICaptureBadInput(t *testing.T) {
	v := sandboxForCLI(t)
	r := cli(t, "capture", "--iface", v.Name)
	requireOneLineError(t, r, 1, "no fast drop on "+v.Name+": attach it with 'xdpdrop drop --iface "+v.Name+" --rules FILE'")

	rules := writeRules(t, "drop udp dport 11211\n")
	r = cli(t, "drop", "--iface", v.Name, "--rules", rules, "--mode", "driver")
	require.Equal(t, 0, r.code, r.stderr)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--verdict", "dropped"}, 2, `--verdict: unknown verdict "dropped": want drop, pass, redirect, malformed`},
		{[]string{"--sample", "0"}, 2, `--sample "0": want 1/N`},
		{[]string{"--sample", "1/0"}, 2, `--sample "1/0": want 1/N`},
		{[]string{"--rate", "fast"}, 2, `--rate "fast": want N/s`},
		{[]string{"--sample", "1/2", "--rate", "5/s"}, 2, "--sample and --rate: give one of them"},
		{[]string{"--snaplen", "0"}, 2, "--snaplen 0: want 1 to 9216"},
		{[]string{"--queue", "-2"}, 2, "--queue -2: want an rx queue number"},
		{[]string{"--match", "udp dport"}, 2, "--match: "},
		{[]string{"--match", "drop udp"}, 2, "--match: filter \"drop udp\": give the fields of a rule without its action, e.g. \"udp\""},
		{[]string{"--rule", "7"}, 1, "--rule 7: no rule of the fast drop on " + v.Name + " comes from line 7: list them with 'xdpdrop rules list --iface " + v.Name + "'"},
		{[]string{"--rule", "drop tcp dport 1"}, 1, "has no such rule: list them with 'xdpdrop rules list"},
		{[]string{"-w", "/nonexistent-dir/x.pcapng"}, 1, "-w /nonexistent-dir/x.pcapng: open /nonexistent-dir/x.pcapng: no such file or directory"},
		{[]string{"--snap", "10"}, 2, "unknown flag: --snap"},
	} {
		r := cli(t, append([]string{"capture", "--iface", v.Name}, tc.args...)...)
		requireOneLineError(t, r, tc.code, tc.want)
		require.Zero(t, registrations(t, v.Name), "%v", tc.args)
	}
	r = cli(t, "capture", "--verdict", "drop")
	requireOneLineError(t, r, 2, `required flag(s) "iface" not set`)
}

// TestCLICaptureNoticesDetach: a capture whose program goes away ends
// with an error that says why and what to do.
func TestCLICaptureNoticesDetach(t *testing.T) {
	v := sandboxForCLI(t)
	r := cli(t, "drop", "--iface", v.Name, "--deny", "198.18.0.0/16", "--mode", "driver")
	require.Equal(t, 0, r.code, r.stderr)
	c, _, cErr := startCapture(t, nil, "--iface", v.Name)
	r = cli(t, "detach", "--iface", v.Name)
	require.Equal(t, 0, r.code, r.stderr)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "stderr: %s", cErr.String())
		require.Equal(t, 1, ee.ExitCode())
		time.Sleep(50 * time.Millisecond)
		require.Contains(t, cErr.String(), "xdpdrop: the fast drop this capture reads from is no longer attached to "+v.Name)
		require.Contains(t, cErr.String(), "0 frames seen, 0 captured, 0 lost")
	case <-time.After(10 * time.Second):
		t.Fatalf("capture still running 10s after detach; stderr: %s", cErr.String())
	}
}

// TestCLICaptureRuleSamples: a rule's sample modifier keeps 1 in N of its
// frames with no capture running; capture --rule-samples shows them
// afterwards, with the rule that sent them.
func TestCLICaptureRuleSamples(t *testing.T) {
	v := sandboxForCLI(t)
	rules := writeRules(t, "drop udp dport 11211 sample 1/10\ndrop udp dport 19\n")
	r := cli(t, "drop", "--iface", v.Name, "--rules", rules, "--mode", "driver")
	require.Equal(t, 0, r.code, r.stderr)
	r = cli(t, "rules", "list", "--iface", v.Name)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "drop udp dport 11211 sample 1/10")

	send(t, v, "100", "11211")
	send(t, v, "30", "19")
	// The exporter counts them without reading them.
	exp, url := startCLI(t, "exporter", "--metrics", "127.0.0.1:0", "--iface", v.Name)
	require.Contains(t, scrape(t, url), `xdpdrop_rule_samples_total{interface="`+v.Name+`",result="sent"} 10`)
	require.NoError(t, exp.Process.Signal(syscall.SIGINT))
	require.NoError(t, exp.Wait())
	out := filepath.Join(t.TempDir(), "samples.pcapng")
	r = cli(t, "capture", "--iface", v.Name, "--rule-samples", "--duration", "1s", "-w", out)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "10 rule samples sent since the program was loaded, 0 lost")
	_, ps := readPcapng(t, out)
	require.Len(t, ps, 10)
	for _, p := range ps {
		require.Equal(t, `verdict=drop rule=1 rule_text="drop udp dport 11211 sample 1/10" queue=0 cpu=`, p.Comments[0][:len(p.Comments[0])-1])
	}
	r = cli(t, "capture", "--iface", v.Name, "--rule-samples", "--duration", "1s")
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stdout, "read once")
}

// TestCLICaptureRedirect: with a running redirect on the fast drop's
// program, a capture sees the frames handed to the AF_XDP socket with
// the XDP_REDIRECT verdict and the redirect rule, and the dropped ones
// with theirs.
func TestCLICaptureRedirect(t *testing.T) {
	v := sandboxForCLI(t)
	r := cli(t, "drop", "--iface", v.Name, "--mode", "driver", "--rules", writeRules(t, "drop udp dport 54\n"))
	require.Equal(t, 0, r.code, r.stderr)
	red, redErr := startRedirect(t, v, "--queues", "all", "--action", "count", "--filter", writeRules(t, "redirect udp dport 53\n"))
	out := filepath.Join(t.TempDir(), "r.pcapng")
	c, _, cErr := startCapture(t, nil, "--iface", v.Name, "--verdict", "redirect,drop", "-w", out)
	send(t, v, "40", "53")
	send(t, v, "20", "54")
	send(t, v, "10", "55") // passed: not selected
	time.Sleep(500 * time.Millisecond)
	seen, captured, lost := stopCapture(t, c, cErr, syscall.SIGTERM)
	require.Equal(t, [3]uint64{60, 60, 0}, [3]uint64{seen, captured, lost})
	qs := stopRedirect(t, red, redErr)
	require.Equal(t, uint64(40), total(qs, func(q jsonQueue) uint64 { return q.RxFrames }), "the socket got the redirected frames")

	_, ps := readPcapng(t, out)
	by := map[string]int{}
	for _, p := range ps {
		act, ok := pcapng.XDPAction(p.Verdicts[0])
		require.True(t, ok)
		c := p.Comments[0]
		by[strconv.Itoa(int(act))+" "+c[:strings.Index(c, " queue=")]]++
	}
	require.Equal(t, map[string]int{
		`4 verdict=redirect rule=1 origin=redirect rule_text="redirect udp dport 53"`: 40,
		`1 verdict=drop rule=1 rule_text="drop udp dport 54"`:                         20,
	}, by)
}

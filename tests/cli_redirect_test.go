package tests

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

type jsonQueue struct {
	Queue      int    `json:"queue"`
	RxFrames   uint64 `json:"rx_frames"`
	RxBytes    uint64 `json:"rx_bytes"`
	Redirected uint64 `json:"redirected"`
	NoSocket   uint64 `json:"no_socket"`
	ZeroCopy   bool   `json:"zero_copy"`
}

// lastQueues reads redirect's JSON lines and returns the last sample of
// each queue.
func lastQueues(t *testing.T, out string) map[int]jsonQueue {
	t.Helper()
	last := map[int]jsonQueue{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var q jsonQueue
		require.NoError(t, json.Unmarshal(sc.Bytes(), &q), sc.Text())
		last[q.Queue] = q
	}
	return last
}

func total(qs map[int]jsonQueue, f func(jsonQueue) uint64) uint64 {
	var n uint64
	for _, q := range qs {
		n += f(q)
	}
	return n
}

// startRedirect starts `xdpdrop redirect` and waits until its program is
// attached, so traffic sent afterwards is judged by it.
func startRedirect(t *testing.T, v *testenv.Veth, args ...string) (*exec.Cmd, *lockedBuilder) {
	t.Helper()
	cmd := exec.Command(xdpdropBin, append([]string{"redirect", "--iface", v.Name, "--json"}, args...)...)
	var out, errb lockedBuilder
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	require.Eventually(t, func() bool {
		l, err := netlink.LinkByName(v.Name)
		return err == nil && l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
	}, 20*time.Second, 20*time.Millisecond, "redirect never attached: %s", &errb)
	// The first sample comes once the rules are in and the sockets
	// registered (fast drop may have been attached before).
	require.Eventually(t, func() bool { return out.String() != "" || cmd.ProcessState != nil },
		20*time.Second, 20*time.Millisecond, "redirect never printed a sample: %s", &errb)
	return cmd, &errb
}

// lockedBuilder is a strings.Builder that a running command writes into
// while the test reads it.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCLIRedirectPcap writes what the sockets receive into a pcap file and
// reads it back: every frame sent is there, byte for byte.
func TestCLIRedirectPcap(t *testing.T) {
	v := sandboxForCLI(t)
	file := filepath.Join(t.TempDir(), "out.pcap")
	cmd, errb := startRedirect(t, v, "--queues", "all", "--mode", "driver", "--action", "pcap="+file, "--count", "2000")
	r := cli(t, "gen", "--netns", v.NSName, "--iface", v.PeerName, "--count", "2000", "--rate", "20000", "--dport", "4242", "--quiet")
	require.Equal(t, 0, r.code, r.stderr)
	// With every frame on one queue, --count may already have ended it.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		require.ErrorIs(t, err, os.ErrProcessDone)
	}
	require.NoError(t, cmd.Wait(), errb.String())

	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	rd, err := pcapgo.NewReader(f)
	require.NoError(t, err)
	n := 0
	for {
		data, _, err := rd.ReadPacketData()
		if err != nil {
			break
		}
		if len(data) == 64 && data[12] == 0x08 && data[13] == 0x00 && data[14+9] == 17 && data[36] == 0x10 && data[37] == 0x92 {
			n++ // UDP to port 4242, as sent
		}
	}
	require.Equal(t, 2000, n, "every frame sent is in the capture")

	// Ctrl-C detached the program.
	l, err := netlink.LinkByName(v.Name)
	require.NoError(t, err)
	require.False(t, l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached, "redirect detaches on exit")
}

// TestCLIRedirectFilter: only what the filter selects reaches user space;
// the rest goes to the kernel stack.
func TestCLIRedirectFilter(t *testing.T) {
	v := sandboxForCLI(t)
	rules := writeRules(t, "policy pass\nredirect udp dport 53\n")
	cmd, errb := startRedirect(t, v, "--queues", "all", "--mode", "driver", "--filter", rules, "--action", "count")
	for _, tc := range []struct{ count, dport string }{{"3000", "53"}, {"1000", "54"}} {
		r := cli(t, "gen", "--netns", v.NSName, "--iface", v.PeerName, "--count", tc.count, "--rate", "20000", "--dport", tc.dport, "--quiet")
		require.Equal(t, 0, r.code, r.stderr)
	}
	time.Sleep(1500 * time.Millisecond) // one more sample after the traffic

	// Another process sees the running redirect's queues.
	r := cli(t, "stats", "--iface", v.Name, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var st struct {
		Program string `json:"program"`
		Queues  []struct {
			Queue      int    `json:"queue"`
			Redirected uint64 `json:"redirected"`
			Passed     uint64 `json:"passed"`
		} `json:"queues"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	require.Equal(t, "fastdrop", st.Program, "redirect runs on the fast-drop program")
	var redirected uint64
	for _, q := range st.Queues {
		redirected += q.Redirected
	}
	require.Equal(t, uint64(3000), redirected, "stats reads the same per-queue counters")

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, cmd.Wait(), errb.String())
	qs := lastQueues(t, cmd.Stdout.(*lockedBuilder).String())
	require.NotEmpty(t, qs)
	require.Equal(t, uint64(3000), total(qs, func(q jsonQueue) uint64 { return q.Redirected }), "DNS frames redirected")
	require.Equal(t, uint64(3000), total(qs, func(q jsonQueue) uint64 { return q.RxFrames }), "and received")
	require.Zero(t, total(qs, func(q jsonQueue) uint64 { return q.NoSocket }), "every queue had its socket")
	for _, q := range qs {
		require.False(t, q.ZeroCopy, "veth has no zero-copy")
	}
}

// TestCLIRedirectRingSizes: the ring and UMEM sizes given on the command
// line are the socket's (package xsk's tests check them in the kernel);
// only l2fwd, which sends, gets a TX ring.
func TestCLIRedirectRingSizes(t *testing.T) {
	v := sandboxForCLI(t)
	r := cli(t, "redirect", "--iface", v.Name, "--duration", "300ms", "--action", "l2fwd", "--frames", "8192", "--fill-size", "4096",
		"--completion-size", "256", "--rx-size", "1024", "--tx-size", "512")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "each socket: 8192 frames of 4096 B; rings: fill 4096, completion 256, rx 1024, tx 512\n")

	r = cli(t, "redirect", "--iface", v.Name, "--duration", "300ms", "--shared-umem", "--frames", "2048", "--fill-size", "1024")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "each socket: 2048 frames of 4096 B; rings: fill 1024, completion 2048, rx 4096, no tx (receive only)\n")

	r = cli(t, "redirect", "--iface", v.Name, "--duration", "300ms")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "each socket: 4096 frames of 4096 B; rings: fill 4096, completion 2048, rx 4096, no tx (receive only)\n", "the defaults")

	r = cli(t, "redirect", "--iface", v.Name, "--duration", "300ms", "--action", "drop", "--tx-size", "512")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "rx 4096, no tx (receive only)\n", "drop sends nothing: --tx-size is for l2fwd")
}

func TestCLIRedirectBadInput(t *testing.T) {
	v := sandboxForCLI(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--queues", "99"}, `--queues "99"`},
		{[]string{"--action", "mirror"}, `--action "mirror": want count, drop, pcap=FILE or l2fwd`},
		{[]string{"--action", "pcap"}, "--action pcap needs a file"},
		{[]string{"--batch", "1000"}, "--batch 1000: want 1 to 512"},
		{[]string{"--copy", "--zero-copy"}, "choose one"},
		{[]string{"--wait", "nap"}, `--wait "nap"`},
		{[]string{"--fill-size", "3000"}, "--fill-size 3000: want a power of two from 1 to 1048576"},
		{[]string{"--rx-size", "0"}, "--rx-size 0: want a power of two"},
		{[]string{"--tx-size", "2097152"}, "--tx-size 2097152: want a power of two from 1 to 1048576"},
		{[]string{"--completion-size", "-4"}, "--completion-size -4: want a power of two"},
		{[]string{"--frames", "300000"}, "--frames 300000: want 1 to 262144 per socket"},
		{[]string{"--frames", "1024"}, "--frames 1024 is less than --fill-size 4096"},
	} {
		r := cli(t, append([]string{"redirect", "--iface", v.Name}, tc.args...)...)
		requireOneLineError(t, r, 2, tc.want)
	}
	for _, tc := range []struct{ rules, want string }{
		{"redirect udp dport 53\ndrop ether arp queue 3\n", `test.rules:2: "drop ether arp queue 3": queue 3 has no socket of this command (--queues 0): add it to --queues`},
		{"redirect udp dport 53 queue 0-1\n", `test.rules:1: "redirect udp dport 53 queue 0-1": queue 1 has no socket of this command (--queues 0)`},
		{"redirect udp queue 300\n", `test.rules:1: queue 300: 300 is not an rx queue 0-255 (want an rx queue 0-255, a range like 0-3, a comparison like >=4, a list like 0,2 or a negated list like !0,2)`},
		{"redirect udp queue 3-1\n", "test.rules:1: queue 3-1: range 3-1 is empty (write the lower value first: 1-3)"},
		{"redirect udp dport 53\nmalformed drop\n", "'malformed drop' is the interface's verdict, not a redirect filter's: set it with 'xdpdrop drop --iface IF --malformed drop'"},
	} {
		bad := writeRules(t, tc.rules)
		r := cli(t, "redirect", "--iface", v.Name, "--filter", bad)
		requireOneLineError(t, r, 1, tc.want)
	}
	r := cli(t, "rules", "list", "--iface", v.Name)
	require.NotEqual(t, 0, r.code, "nothing attached after bad filters: %s", r.stdout)

	// veth has no zero-copy: a clear refusal, and nothing left attached.
	r = cli(t, "redirect", "--iface", v.Name, "--zero-copy", "--duration", "1s")
	requireOneLineError(t, r, 1, "leave out --zero-copy (the kernel then chooses) or use --copy")
	l, err := netlink.LinkByName(v.Name)
	require.NoError(t, err)
	require.False(t, l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached, "nothing left attached after the error")
}

// TestCLIRedirectNoticesDetach: `detach` from another process takes the
// running redirect's program away; redirect notices within a few seconds,
// says so and exits non-zero instead of waiting for frames forever.
func TestCLIRedirectNoticesDetach(t *testing.T) {
	v := sandboxForCLI(t)
	cmd, errb := startRedirect(t, v, "--queues", "all", "--mode", "driver", "--action", "count")
	r := cli(t, "detach", "--iface", v.Name)
	require.Equal(t, 0, r.code, r.stderr)

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "redirect exits with an error; stderr: %s", errb)
		require.Equal(t, 1, ee.ExitCode())
		require.Contains(t, errb.String(), "xdpdrop: the redirect program is no longer attached to "+v.Name)
	case <-time.After(10 * time.Second):
		t.Fatalf("redirect still running 10s after its program was detached; stderr: %s", errb)
	}
}

// listRules returns the rules in force on iface by text, with origins.
func listRules(t *testing.T, iface string) map[string]jsonRule {
	t.Helper()
	r := cli(t, "rules", "list", "--iface", iface, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var list struct {
		Rules []jsonRule `json:"rules"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	out := map[string]jsonRule{}
	for _, jr := range list.Rules {
		out[jr.Rule] = jr
	}
	return out
}

func attached(t *testing.T, iface string) bool {
	t.Helper()
	l, err := netlink.LinkByName(iface)
	require.NoError(t, err)
	return l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
}

// stopRedirect stops a running redirect with Ctrl-C and returns its last
// per-queue samples.
func stopRedirect(t *testing.T, cmd *exec.Cmd, errb *lockedBuilder) map[int]jsonQueue {
	t.Helper()
	time.Sleep(1500 * time.Millisecond) // one more sample after the traffic
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, cmd.Wait(), errb.String())
	return lastQueues(t, cmd.Stdout.(*lockedBuilder).String())
}

// TestCLIDropThenRedirect: fast drop runs, redirect joins it on the same
// interface (one program), the drop rules come first, and stopping the
// redirect leaves them in force.
func TestCLIDropThenRedirect(t *testing.T) {
	v := sandboxForCLI(t)
	r := cli(t, "drop", "--iface", v.Name, "--mode", "driver", "--rules", writeRules(t, "drop udp dport 54\ndrop src 198.51.100.0/24\n"))
	require.Equal(t, 0, r.code, r.stderr)
	cmd, errb := startRedirect(t, v, "--queues", "all", "--action", "count", "--filter", writeRules(t, "redirect udp dport 53-54\n"))
	rules := listRules(t, v.Name)
	require.Equal(t, "drop", rules["drop udp dport 54"].Origin)
	// The veth's one queue is every queue: the rule needs no limit and
	// stays as written (and on the program's plain path).
	require.Equal(t, "redirect", rules["redirect udp dport 53-54"].Origin, "the filter's rule as written: %v", rules)
	send(t, v, "2000", "53")
	send(t, v, "1000", "54") // a drop rule matches first
	qs := stopRedirect(t, cmd, errb)
	require.Equal(t, uint64(2000), total(qs, func(q jsonQueue) uint64 { return q.RxFrames }), "DNS reached the socket")

	require.True(t, attached(t, v.Name), "the drop command's program stays")
	rules = listRules(t, v.Name)
	require.Len(t, rules, 2, "the redirect's rules are gone: %v", rules)
	require.Equal(t, uint64(1000), rules["drop udp dport 54"].Packets, "dropped before any socket saw it")
	send(t, v, "500", "54")
	require.Equal(t, uint64(1500), listRules(t, v.Name)["drop udp dport 54"].Packets, "the drop rules stay in force")
}

// TestCLIRedirectThenDrop: redirect attaches first; drop adds its rules
// to the same program without breaking the running redirect; when the
// redirect stops, the drop rules stay attached.
func TestCLIRedirectThenDrop(t *testing.T) {
	v := sandboxForCLI(t)
	cmd, errb := startRedirect(t, v, "--queues", "all", "--action", "count")
	r := cli(t, "drop", "--iface", v.Name, "--rules", writeRules(t, "drop udp dport 54\n"), "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"replaced": true`, "drop joined the running program")
	send(t, v, "1000", "53") // no filter: policy redirect on the queue
	send(t, v, "700", "54")
	require.Equal(t, uint64(700), listRules(t, v.Name)["drop udp dport 54"].Packets)
	qs := stopRedirect(t, cmd, errb)
	require.GreaterOrEqual(t, total(qs, func(q jsonQueue) uint64 { return q.RxFrames }), uint64(1000), "redirect kept working after drop")
	require.Less(t, total(qs, func(q jsonQueue) uint64 { return q.RxFrames }), uint64(1700), "the dropped frames never reached the socket")

	require.True(t, attached(t, v.Name), "drop's rules keep the program attached")
	rules := listRules(t, v.Name)
	require.Len(t, rules, 1, "%v", rules)
	send(t, v, "300", "54")
	require.Equal(t, uint64(1000), listRules(t, v.Name)["drop udp dport 54"].Packets)

	// Alone, redirect detaches what it attached.
	r = cli(t, "detach", "--iface", v.Name)
	require.Equal(t, 0, r.code, r.stderr)
	r = cli(t, "redirect", "--iface", v.Name, "--duration", "300ms")
	require.Equal(t, 0, r.code, r.stderr)
	require.False(t, attached(t, v.Name), "a redirect that attached alone detaches on exit")
}

// TestCLIMixedRuleFile: one rule file of drop, pass and redirect rules,
// through xdpdrop drop: without a socket, redirected frames go to the
// stack (counted per queue as such), and each rule counts what it took.
func TestCLIMixedRuleFile(t *testing.T) {
	v := sandboxForCLI(t)
	r := cli(t, "drop", "--iface", v.Name, "--rules", writeRules(t, "drop udp dport 54\npass udp dport 55\nredirect udp dport 53 queue 0\npolicy drop\n"))
	require.Equal(t, 0, r.code, r.stderr)
	send(t, v, "300", "53")
	send(t, v, "200", "54")
	send(t, v, "100", "55")
	send(t, v, "50", "56")
	rules := listRules(t, v.Name)
	require.Equal(t, uint64(300), rules["redirect udp dport 53 queue 0"].Packets)
	require.Equal(t, uint64(200), rules["drop udp dport 54"].Packets)
	require.Equal(t, uint64(100), rules["pass udp dport 55"].Packets)
	st := cli(t, "stats", "--iface", v.Name, "--json")
	require.Equal(t, 0, st.code, st.stderr)
	var s struct {
		Queues []struct {
			Queue      int    `json:"queue"`
			Redirected uint64 `json:"redirected"`
			Passed     uint64 `json:"passed"`
		} `json:"queues"`
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &s), st.stdout)
	require.Len(t, s.Queues, 1, st.stdout)
	require.Equal(t, uint64(300), s.Queues[0].Passed, "no socket on queue 0: to the stack")

	// A redirect started now gets the frames the file's redirect rule
	// chooses, its own rules coming after.
	cmd, errb := startRedirect(t, v, "--queues", "0", "--action", "count", "--filter", writeRules(t, "drop udp\n"))
	send(t, v, "400", "53")
	send(t, v, "100", "57") // the filter's drop rule
	qs := stopRedirect(t, cmd, errb)
	require.Equal(t, uint64(400), total(qs, func(q jsonQueue) uint64 { return q.RxFrames }))
	require.Equal(t, uint64(700), listRules(t, v.Name)["redirect udp dport 53 queue 0"].Packets)
}

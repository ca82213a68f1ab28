package tests

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	Passed     uint64 `json:"passed"`
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
func startRedirect(t *testing.T, v *testenv.Veth, args ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(xdpdropBin, append([]string{"redirect", "--iface", v.Name, "--json"}, args...)...)
	var out, errb strings.Builder
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
	time.Sleep(200 * time.Millisecond) // sockets are registered right after the attach
	return cmd, &errb
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
	require.Equal(t, "redirect", st.Program)
	var redirected uint64
	for _, q := range st.Queues {
		redirected += q.Redirected
	}
	require.Equal(t, uint64(3000), redirected, "stats reads the same per-queue counters")

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, cmd.Wait(), errb.String())
	qs := lastQueues(t, cmd.Stdout.(*strings.Builder).String())
	require.NotEmpty(t, qs)
	require.Equal(t, uint64(3000), total(qs, func(q jsonQueue) uint64 { return q.Redirected }), "DNS frames redirected")
	require.Equal(t, uint64(3000), total(qs, func(q jsonQueue) uint64 { return q.RxFrames }), "and received")
	require.GreaterOrEqual(t, total(qs, func(q jsonQueue) uint64 { return q.Passed }), uint64(1000), "the rest went to the stack")
	for _, q := range qs {
		require.False(t, q.ZeroCopy, "veth has no zero-copy")
	}
}

// TestCLIRedirectRingSizes: the ring and UMEM sizes given on the command
// line are the socket's (package xsk's tests check them in the kernel).
func TestCLIRedirectRingSizes(t *testing.T) {
	v := sandboxForCLI(t)
	r := cli(t, "redirect", "--iface", v.Name, "--duration", "300ms", "--frames", "8192", "--fill-size", "4096",
		"--completion-size", "256", "--rx-size", "1024", "--tx-size", "512")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "each socket: 8192 frames of 4096 B; rings: fill 4096, completion 256, rx 1024, tx 512\n")

	r = cli(t, "redirect", "--iface", v.Name, "--duration", "300ms", "--shared-umem", "--frames", "2048", "--fill-size", "1024")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "each socket: 2048 frames of 4096 B; rings: fill 1024, completion 2048, rx 4096, tx 2048\n")

	r = cli(t, "redirect", "--iface", v.Name, "--duration", "300ms")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "each socket: 4096 frames of 4096 B; rings: fill 4096, completion 2048, rx 4096, tx 2048\n", "the defaults")
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
	bad := writeRules(t, "redirect udp dport 53\ndrop ether arp\n")
	r := cli(t, "redirect", "--iface", v.Name, "--filter", bad)
	requireOneLineError(t, r, 1, "test.rules:2")

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

package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// xdpdropBin is the CLI built once for the whole package by TestMain.
var xdpdropBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "xdpdrop-cli")
	if err != nil {
		panic(err)
	}
	// Readable by all: one test runs the binary as an unprivileged user.
	if err := os.Chmod(dir, 0o755); err != nil {
		panic(err)
	}
	xdpdropBin = filepath.Join(dir, "xdpdrop")
	build := exec.Command("go", "build", "-o", xdpdropBin, "../cmd/xdpdrop")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		panic("build xdpdrop: " + err.Error())
	}
	// The commands pin under loader.DefaultPinRoot and remove their pins;
	// the root itself, made by the first of them, goes too if these tests
	// made it (os.Remove takes only an empty directory).
	_, rootErr := os.Stat(loader.DefaultPinRoot)
	code := m.Run()
	os.RemoveAll(dir)
	if os.IsNotExist(rootErr) {
		os.Remove(loader.DefaultPinRoot)
	}
	os.Exit(code)
}

// cliResult is what a run of the CLI produced.
type cliResult struct {
	stdout, stderr string
	code           int
}

// cli runs the built binary and returns its output and exit code.
func cli(t *testing.T, args ...string) cliResult {
	t.Helper()
	return runCLI(t, exec.Command(xdpdropBin, args...))
}

// runCLI runs a prepared command of the built binary.
func runCLI(t *testing.T, cmd *exec.Cmd) cliResult {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return cliResult{out.String(), errb.String(), code}
}

// requireOneLineError checks the shape every failure must have: exit code,
// a one-line message naming the problem, no Go stack trace.
func requireOneLineError(t *testing.T, r cliResult, code int, want string) {
	t.Helper()
	require.Equal(t, code, r.code, "exit code; stderr: %s", r.stderr)
	require.Contains(t, r.stderr, want)
	require.NotContains(t, r.stderr, "goroutine ")
	require.NotContains(t, r.stderr, "panic")
	require.True(t, strings.HasPrefix(r.stderr, "xdpdrop: "), "stderr starts with the program name: %q", r.stderr)
}

func TestCLIUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"no-such-verb"}, `unknown command "no-such-verb"`},
		{[]string{"gen"}, `required flag(s) "iface" not set`},
		{[]string{"gen", "--iface", "x", "--proto", "sctp"}, `--proto "sctp": want udp or tcp`},
		{[]string{"gen", "--iface", "x", "--size", "20"}, "--size 20: want 60 to 9000 bytes"},
		{[]string{"gen", "--iface", "x", "--flows", "70000"}, "--flows 70000: want 1 to 65536"},
		{[]string{"gen", "--iface", "x", "--src", "1.2.3.4", "--dst", "::1"}, "use two IPv4 or two IPv6 addresses"},
		{[]string{"gen", "--iface", "x", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"gen", "--iface", "x", "--in-flight", "-1"}, "--in-flight -1: want 0 to 16"},
		{[]string{"gen", "--iface", "x", "--hold", "sometimes"}, `--hold "sometimes": want auto, on or off`},
		{[]string{"gen", "--iface", "x", "--chunk", "5000000000"}, "--chunk 5000000000: want at most 4294967295 frames"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			requireOneLineError(t, cli(t, tc.args...), 2, tc.want)
		})
	}
}

func TestCLIGenUnknownInterface(t *testing.T) {
	testenv.RequireRoot(t)
	r := cli(t, "gen", "--iface", "xdnosuch0", "--count", "1")
	requireOneLineError(t, r, 1, `interface "xdnosuch0"`)
	require.Contains(t, r.stderr, "ip link")
}

// TestCLIGen sends a counted burst from the peer namespace and checks the
// JSON summary and that the frames reached the other end.
func TestCLIGen(t *testing.T) {
	objs := loadCount(t, gen.BasicVerdictVERDICT_DROP)
	veth := testenv.NewVeth(t, testenv.VethOptions{})
	l, err := link.AttachXDP(link.XDPOptions{Program: objs.XdpCount, Interface: veth.Index, Flags: link.XDPDriverMode})
	require.NoError(t, err)
	defer l.Close()

	r := cli(t, "gen", "--netns", veth.NSName, "--iface", veth.PeerName, "--count", "50000",
		"--proto", "tcp", "--flows", "1000", "--size", "128", "--vlan", "7", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var sum struct {
		Interface string  `json:"interface"`
		Frames    uint64  `json:"frames"`
		Size      int     `json:"frame_bytes"`
		Flows     uint32  `json:"flows"`
		PPS       float64 `json:"pps"`
		Held      bool    `json:"held"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sum), r.stdout)
	require.True(t, sum.Held, "unpaced, gen keeps a holding run by default")
	require.Equal(t, veth.PeerName, sum.Interface)
	require.Equal(t, uint64(50000), sum.Frames)
	require.Equal(t, 128, sum.Size)
	require.Equal(t, uint32(1000), sum.Flows)
	require.Positive(t, sum.PPS)

	got := sumVerdict(t, objs.Verdicts, gen.BasicVerdictVERDICT_DROP)
	require.GreaterOrEqual(t, got.Packets, uint64(50000))
	// (a few frames the pair sends by itself may be counted too; the
	// holding run's never arrive)
	require.LessOrEqual(t, got.Packets, uint64(50000+16))
	require.GreaterOrEqual(t, got.Bytes, uint64(50000*128))
}

// cliAs runs the CLI as another user, with no capabilities.
func cliAs(t *testing.T, uid uint32, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(xdpdropBin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	return runCLI(t, cmd)
}

func TestCLICompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_xdpdrop", "zsh": "#compdef xdpdrop", "fish": "complete -c xdpdrop"} {
		r := cli(t, "completion", shell)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, want, shell)
	}
}

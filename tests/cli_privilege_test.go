package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/capture"
	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// serviceUID is the unprivileged user the tests run the CLI as (nobody).
const serviceUID = 65534

// The least privilege of each command, as README.md's table states it
// (setpriv's names).
var (
	capsAttach   = []string{"bpf", "net_admin", "perfmon"}
	capsChange   = []string{"bpf"}
	capsRedirect = []string{"bpf", "net_admin", "net_raw", "perfmon", "ipc_lock"}
	capsCapture  = []string{"bpf"}
)

// setprivCmd prepares a command run by setpriv(1) as uid and gid
// serviceUID, without supplementary groups, holding exactly caps (as
// ambient capabilities; none if caps is empty).
func setprivCmd(t *testing.T, caps []string, name string, args ...string) *exec.Cmd {
	t.Helper()
	sp, err := exec.LookPath("setpriv")
	if err != nil {
		testenv.SkipOrFail(t, "needs setpriv(1) from util-linux to run commands with chosen capabilities")
	}
	set := "-all"
	if len(caps) > 0 {
		set = "+" + strings.Join(caps, ",+")
	}
	uid := fmt.Sprint(serviceUID)
	return exec.Command(sp, append([]string{"--reuid=" + uid, "--regid=" + uid, "--clear-groups",
		"--inh-caps=" + set, "--ambient-caps=" + set, name}, args...)...)
}

// cliCaps runs the CLI as serviceUID holding exactly caps.
func cliCaps(t *testing.T, caps []string, args ...string) cliResult {
	t.Helper()
	return runCLI(t, setprivCmd(t, caps, xdpdropBin, args...))
}

// serviceDir makes a fresh directory on bpffs owned by serviceUID (mode
// 0700) for a pin root of that user's, removed with its pins at the end.
func serviceDir(t *testing.T) string {
	t.Helper()
	dir := testenv.TempPinDir(t)
	require.NoError(t, os.Chown(dir, serviceUID, serviceUID))
	return dir
}

// requireNothingAttached checks that the interface runs no XDP program.
func requireNothingAttached(t *testing.T, iface string) {
	t.Helper()
	l, err := netlink.LinkByName(iface)
	require.NoError(t, err)
	require.False(t, l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached, "nothing attached to %s", iface)
}

// TestCLISetprivCapabilities: the helper gives exactly the capabilities
// asked for, so the tests below prove what they claim.
func TestCLISetprivCapabilities(t *testing.T) {
	testenv.RequireRoot(t)
	out, err := setprivCmd(t, capsRedirect, "cat", "/proc/self/status").CombinedOutput()
	require.NoError(t, err, "%s", out)
	want := uint64(1)<<unix.CAP_BPF | 1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_NET_RAW | 1<<unix.CAP_PERFMON | 1<<unix.CAP_IPC_LOCK
	require.Contains(t, string(out), fmt.Sprintf("CapEff:\t%016x\n", want))
	require.Contains(t, string(out), fmt.Sprintf("Uid:\t%d\t%d", serviceUID, serviceUID))
}

// TestCLILeastPrivilege runs every command of an operator's session as an
// unprivileged service user holding exactly the capabilities README.md
// documents for it, with a pin root of that user's: each must succeed.
func TestCLILeastPrivilege(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	pins := filepath.Join(serviceDir(t), "pins") // made by the tool, as the service user
	pr := []string{"--pin-root", pins}

	r := cliCaps(t, capsAttach, append([]string{"drop", "--iface", v.Name, "--deny", "203.0.113.0/24", "--json"}, pr...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"pin_dir": "`+filepath.Join(pins, v.Name)+`"`)
	for _, d := range []string{pins, filepath.Join(pins, v.Name)} {
		fi, err := os.Lstat(d)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), d)
		require.Equal(t, uint32(serviceUID), fi.Sys().(*syscall.Stat_t).Uid, d)
	}

	r = cliCaps(t, capsChange, append([]string{"rules", "add", "--iface", v.Name, "drop udp dport 11211"}, pr...)...)
	require.Equal(t, 0, r.code, r.stderr)
	r = cliCaps(t, capsChange, append([]string{"drop", "--iface", v.Name, "--deny", "203.0.113.0/24", "--deny", "198.51.100.0/24"}, pr...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "replaced the rules")
	r = cliCaps(t, capsChange, append([]string{"rules", "add", "--iface", v.Name, "drop udp dport 11211"}, pr...)...)
	require.Equal(t, 0, r.code, r.stderr)

	r = cliCaps(t, nil, append([]string{"rules", "list", "--iface", v.Name}, pr...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "drop udp dport 11211")

	send(t, v, "100", "11211")
	r = cliCaps(t, nil, append([]string{"stats", "--iface", v.Name, "--json"}, pr...)...)
	require.Equal(t, 0, r.code, r.stderr)
	var s jsonStats
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
	rule, ok := s.rule("drop udp dport 11211")
	require.True(t, ok, r.stdout)
	require.Equal(t, uint64(100), rule.Packets)

	// Bans: listing and lifting them need no capability either.
	r = cliCaps(t, capsChange, append([]string{"rules", "add", "--iface", v.Name, "limit 10/s burst 5 per src ban 1m udp dport 9"}, pr...)...)
	require.Equal(t, 0, r.code, r.stderr)
	send(t, v, "20", "9")
	r = cliCaps(t, nil, append([]string{"bans", "--iface", v.Name, "--json"}, pr...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"rule": "limit 10/s burst 5 per src ban 1m udp dport 9"`)
	r = cliCaps(t, nil, append([]string{"unban", "--iface", v.Name, "all"}, pr...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "lifted the ban of ")

	r = cliCaps(t, nil, append([]string{"status", "--iface", v.Name, "--json"}, pr...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"ours": true`)
	require.Contains(t, r.stdout, `"pinned": true`)
	require.Contains(t, r.stdout, `"name": "xdp_fastdrop"`, "the pins name the program")

	exp := setprivCmd(t, nil, xdpdropBin, append([]string{"exporter", "--metrics", "127.0.0.1:0", "--iface", v.Name}, pr...)...)
	url := startCmd(t, exp)
	require.Contains(t, scrape(t, url), `xdpdrop_rule_packets_total{action="drop",interface="`+v.Name+`",rule="drop udp dport 11211"} 100`)
	require.NoError(t, exp.Process.Signal(syscall.SIGINT))
	require.NoError(t, exp.Wait(), "exporter exits 0 on Ctrl-C")

	capCmd, capOut, capErr := startCaptureCmd(t, setprivCmd(t, capsCapture, xdpdropBin,
		append([]string{"capture", "--iface", v.Name, "--rule", "drop udp dport 11211", "--count", "5"}, pr...)...), nil)
	send(t, v, "5", "11211")
	_, captured, _ := stopCapture(t, capCmd, capErr, nil)
	require.Equal(t, uint64(5), captured)
	require.Equal(t, 5, strings.Count(capOut.String(), `"drop udp dport 11211", queue 0`), capOut.String())
	// Read as root from the service user's pins (which the loader, as
	// root, rightly refuses to trust): no registration left.
	main, err := ebpf.LoadPinnedMap(filepath.Join(pins, v.Name, "maps", gen.FastdropMapFdMain), nil)
	require.NoError(t, err)
	reg, err := capture.Registrations(main)
	main.Close()
	require.NoError(t, err)
	require.Zero(t, reg)

	r = cliCaps(t, nil, append([]string{"detach", "--iface", v.Name}, pr...)...)
	require.Equal(t, 0, r.code, r.stderr)
	requireNothingAttached(t, v.Name)
	require.NoDirExists(t, filepath.Join(pins, v.Name))

	r = cliCaps(t, capsRedirect, append([]string{"redirect", "--iface", v.Name, "--queues", "0", "--duration", "1s", "--json"}, pr...)...)
	require.Equal(t, 0, r.code, r.stderr)
	requireNothingAttached(t, v.Name)
}

// TestCLIMissingCapability: with one capability of a command's set
// removed, the error names that capability as the one this process
// lacks, and nothing is left attached.
func TestCLIMissingCapability(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	pr := []string{"--pin-root", filepath.Join(serviceDir(t), "pins")}
	for _, tc := range []struct {
		caps []string
		args []string
		want string
	}{
		{[]string{"bpf", "net_admin"}, []string{"drop", "--iface", v.Name, "--deny", "203.0.113.0/24"}, "this process lacks CAP_PERFMON"},
		{[]string{"bpf", "perfmon"}, []string{"drop", "--iface", v.Name, "--deny", "203.0.113.0/24"}, "this process lacks CAP_NET_ADMIN"},
		{[]string{"net_admin", "perfmon"}, []string{"drop", "--iface", v.Name, "--deny", "203.0.113.0/24"}, "this process lacks CAP_BPF"},
		{[]string{"bpf", "net_admin", "perfmon", "ipc_lock"}, []string{"redirect", "--iface", v.Name, "--duration", "1s"}, "this process lacks CAP_NET_RAW"},
	} {
		r := cliCaps(t, tc.caps, append(tc.args, pr...)...)
		t.Log(r.stderr)
		requireOneLineError(t, r, 1, tc.want)
		require.NotContains(t, r.stderr, "RemoveMemlock", "no Go identifiers")
		requireNothingAttached(t, v.Name)
	}
}

// TestCLIPinRootOfAnotherUser: a pin root that belongs to someone else is
// named, with its owner, instead of a capability the process holds.
func TestCLIPinRootOfAnotherUser(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	rootOwned := testenv.TempPinDir(t) // root's, mode 0700
	r := cliCaps(t, capsAttach, "drop", "--iface", v.Name, "--deny", "203.0.113.0/24", "--pin-root", rootOwned)
	t.Log(r.stderr)
	requireOneLineError(t, r, 1, rootOwned+" belongs to root")
	require.Contains(t, r.stderr, "--pin-root")
	require.NotContains(t, r.stderr, "CAP_", "no capability is missing")
	requireNothingAttached(t, v.Name)

	// A directory of root's that others may enter but not write in: the
	// pin root cannot be made there, and the error says why.
	require.NoError(t, os.Chmod(rootOwned, 0o755))
	r = cliCaps(t, capsAttach, "drop", "--iface", v.Name, "--deny", "203.0.113.0/24", "--pin-root", filepath.Join(rootOwned, "pins"))
	t.Log(r.stderr)
	requireOneLineError(t, r, 1, "a file permission, not a capability: "+rootOwned+" belongs to root (mode 0755)")
	require.NotContains(t, r.stderr, "CAP_", "no capability is missing")
	requireNothingAttached(t, v.Name)
}

// TestCLIPinRootTakenOver is the attack on a world-writable bpffs (the
// default one is mode 1777): a user without any capability makes the pin
// root before root does. root's drop must refuse it, saying whose it is,
// and attach nothing. With a pin root of root's own, that user can neither
// move an interface's pins away nor add any: it is owner-only.
func TestCLIPinRootTakenOver(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	shared := testenv.TempPinDir(t)
	require.NoError(t, os.Chmod(shared, os.ModeSticky|0o777)) // 1777, as /sys/fs/bpf
	taken := filepath.Join(shared, "xdpdrop")
	out, err := setprivCmd(t, nil, "mkdir", "-m", "0755", taken).CombinedOutput()
	require.NoError(t, err, "%s", out)

	for _, args := range [][]string{
		{"drop", "--iface", v.Name, "--deny", "203.0.113.0/24"},
		{"rules", "list", "--iface", v.Name},
		{"status"},
	} {
		r := cli(t, append(args, "--pin-root", taken)...)
		t.Log(r.stderr)
		requireOneLineError(t, r, 1, taken+" belongs to")
		require.Contains(t, r.stderr, fmt.Sprintf("uid %d", serviceUID))
		require.Contains(t, r.stderr, "another user made it")
		require.Contains(t, r.stderr, "--pin-root")
	}
	requireNothingAttached(t, v.Name)
	ents, err := os.ReadDir(taken)
	require.NoError(t, err)
	require.Empty(t, ents, "nothing pinned in the other user's directory")

	// root's own pin root in the same world-writable directory.
	mine := filepath.Join(shared, "root-pins")
	r := cli(t, "drop", "--iface", v.Name, "--deny", "203.0.113.0/24", "--pin-root", mine)
	require.Equal(t, 0, r.code, r.stderr)
	t.Cleanup(func() { cli(t, "detach", "--iface", v.Name, "--pin-root", mine) })
	ifDir := filepath.Join(mine, v.Name)
	for _, d := range []string{mine, ifDir} {
		fi, err := os.Lstat(d)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), d)
	}
	out, err = setprivCmd(t, nil, "mv", ifDir, filepath.Join(shared, "stolen")).CombinedOutput()
	require.Error(t, err, "moving the pins out must fail: %s", out)
	require.Contains(t, string(out), "Permission denied")
	out, err = setprivCmd(t, nil, "mkdir", filepath.Join(mine, "planted")).CombinedOutput()
	require.Error(t, err, "adding to the pin root must fail: %s", out)
	out, err = setprivCmd(t, nil, "mv", mine, filepath.Join(shared, "stolen")).CombinedOutput()
	require.Error(t, err, "the sticky directory keeps root's pin root where it is: %s", out)

	r = cli(t, "rules", "add", "--iface", v.Name, "--pin-root", mine, "drop udp dport 11211")
	require.Equal(t, 0, r.code, "root keeps control of its filter: %s", r.stderr)
}

// TestCLIPrivateMountNS: in a mount namespace of its own where
// /sys/fs/bpf is not bpffs (here a writable tmpfs, so a bpffs could be
// mounted over it), drop must not mount one, pin into it and report
// success: those pins, and the program, would vanish with the namespace.
// It says so, and leaves nothing attached.
func TestCLIPrivateMountNS(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	testenv.RequireBPFFS(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.SkipOrFail(t, "needs unshare(1) from util-linux")
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs tmpfs /sys/fs/bpf && exec "$0" "$@"`, xdpdropBin, "drop", "--iface", v.Name, "--deny", "203.0.113.0/24")
	r := runCLI(t, cmd)
	t.Log(r.stderr)
	requireOneLineError(t, r, 1, "runs in a mount namespace of its own")
	require.Contains(t, r.stderr, "would vanish with this namespace")
	require.Contains(t, r.stderr, "mount -t bpf bpf /sys/fs/bpf")
	requireNothingAttached(t, v.Name)
}

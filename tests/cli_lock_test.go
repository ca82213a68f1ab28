package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// cliConcurrently runs the CLI once per argument list, all at once, and
// returns the results in the same order.
func cliConcurrently(t *testing.T, runs [][]string) []cliResult {
	t.Helper()
	out := make([]cliResult, len(runs))
	var wg sync.WaitGroup
	for i, args := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = runCLI(t, exec.Command(xdpdropBin, args...))
		}()
	}
	wg.Wait()
	return out
}

func ruleTexts(t *testing.T, iface string) map[string]bool {
	t.Helper()
	r := cli(t, "rules", "list", "--iface", iface, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var list struct {
		Rules []jsonRule `json:"rules"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	got := map[string]bool{}
	for _, rl := range list.Rules {
		got[rl.Rule] = true
	}
	require.Len(t, got, len(list.Rules), "no rule twice")
	return got
}

// TestCLIConcurrentRuleAdds: 20 `rules add` at once, which together
// outgrow the tables the program was loaded with (so some of them load it
// again with bigger ones and swap it in), all succeed one after the other,
// and the rule set ends with every rule of every one of them.
func TestCLIConcurrentRuleAdds(t *testing.T) {
	v := sandboxForCLI(t)
	r := cli(t, "drop", "--iface", v.Name, "--deny", "10.0.0.16/28")
	require.Equal(t, 0, r.code, r.stderr)

	// 20 x 50 /28s in 1000 different /24s: 1000 tbl8 groups, where the
	// first load made room for 258.
	const adds, each = 20, 50
	want := map[string]bool{"drop src 10.0.0.16/28": true}
	runs := make([][]string, adds)
	for i := range adds {
		runs[i] = []string{"rules", "add", "--iface", v.Name, "--lock-timeout", "5m"}
		for j := range each {
			rule := fmt.Sprintf("drop src 10.%d.%d.16/28", 1+i, j)
			runs[i] = append(runs[i], rule)
			want[rule] = true
		}
	}
	reloaded := 0
	for i, r := range cliConcurrently(t, runs) {
		require.Equal(t, 0, r.code, "rules add %d: %s", i, r.stderr)
		require.Contains(t, r.stdout, fmt.Sprintf("added %d rule(s) on %s", each, v.Name))
		if strings.Contains(r.stdout, "loaded again with bigger ones") {
			reloaded++
		}
	}
	require.Positive(t, reloaded, "the rules outgrew the tables at least once")
	require.Equal(t, want, ruleTexts(t, v.Name), "every rule of every add is in force")
}

// TestCLIConcurrentDropDetach: five first-time `drop`s at once on one
// interface all succeed (one attaches, the others replace its rules), five
// `detach`es at once all succeed (one detaches, the others find nothing
// left), and so does a mix of the two.
func TestCLIConcurrentDropDetach(t *testing.T) {
	v := sandboxForCLI(t)
	const n = 5
	var runs [][]string
	var sets []string
	for i := range n {
		p := fmt.Sprintf("10.%d.0.0/16", 1+i)
		sets = append(sets, "drop src "+p)
		// Every command waits for all before it: five attaches of about
		// 2 s each are more than the default 10 s on a busy machine, and
		// this test is about the order, not the wait (TestCLILockTimeout).
		runs = append(runs, []string{"drop", "--iface", v.Name, "--deny", p, "--json", "--lock-timeout", "5m"})
	}
	attached := 0
	for i, r := range cliConcurrently(t, runs) {
		require.Equal(t, 0, r.code, "drop %d: %s", i, r.stderr)
		var res struct {
			Replaced bool `json:"replaced"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
		if !res.Replaced {
			attached++
		}
	}
	require.Equal(t, 1, attached, "one attached, the others replaced its rules")
	got := ruleTexts(t, v.Name)
	require.Len(t, got, 1, "one whole rule set is in force, the last one written")
	for rule := range got {
		require.Contains(t, sets, rule)
	}

	runs = nil
	for range n {
		runs = append(runs, []string{"detach", "--iface", v.Name, "--lock-timeout", "5m"})
	}
	detached := 0
	for i, r := range cliConcurrently(t, runs) {
		require.Equal(t, 0, r.code, "detach %d: %s", i, r.stderr)
		if strings.HasPrefix(r.stdout, "detached from "+v.Name) {
			detached++
		} else {
			require.Contains(t, r.stdout, "nothing attached to "+v.Name)
		}
	}
	require.Equal(t, 1, detached)
	requireNothingOn(t, v.Name)

	runs = nil
	for i := range 2 * n {
		if i%2 == 0 {
			runs = append(runs, []string{"drop", "--iface", v.Name, "--deny", "192.0.2.0/24", "--lock-timeout", "5m"})
		} else {
			runs = append(runs, []string{"detach", "--iface", v.Name, "--lock-timeout", "5m"})
		}
	}
	for i, r := range cliConcurrently(t, runs) {
		require.Equal(t, 0, r.code, "%s: %s", strings.Join(runs[i], " "), r.stderr)
	}
	r := cli(t, "detach", "--iface", v.Name)
	require.Equal(t, 0, r.code, r.stderr)
	requireNothingOn(t, v.Name)
}

// requireNothingOn asserts that iface runs no XDP program and has no pins.
func requireNothingOn(t *testing.T, iface string) {
	t.Helper()
	l, err := netlink.LinkByName(iface)
	require.NoError(t, err)
	require.False(t, l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached, "no XDP program left on %s", iface)
	require.NoDirExists(t, filepath.Join(loader.DefaultPinRoot, iface))
}

// TestCLILockTimeout: a command that cannot get the interface's lock in
// time fails with one line that names the holder and what to do. The
// holder is flock(1) on the lock directory the loader documents, so that
// the lock is known to work with other tools too.
func TestCLILockTimeout(t *testing.T) {
	v := sandboxForCLI(t)
	flock, err := exec.LookPath("flock")
	if err != nil {
		testenv.SkipOrFail(t, "needs flock(1) from util-linux")
	}
	r := cli(t, "drop", "--iface", v.Name, "--deny", "10.0.0.0/8")
	require.Equal(t, 0, r.code, r.stderr)
	dir := filepath.Join(loader.DefaultPinRoot, "lock:"+v.Name)
	require.NoError(t, os.Mkdir(dir, 0o700))
	t.Cleanup(func() { os.Remove(dir) })
	// --close: the lock stays with flock(1) itself, not with sleep.
	holder := exec.Command(flock, "--exclusive", "--close", dir, "sleep", "60")
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, holder.Start())
	pid := holder.Process.Pid
	stop := func() { syscall.Kill(-pid, syscall.SIGKILL) } // flock and its sleep
	t.Cleanup(func() { stop(); holder.Wait() })
	// (Not by trying the lock: a try that succeeds removes the directory
	// flock(1) may be about to lock.)
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile("/proc/locks")
		return strings.Contains(string(b), fmt.Sprintf(" FLOCK  ADVISORY  WRITE %d ", pid))
	}, 5*time.Second, 10*time.Millisecond, "flock(1) takes the lock")

	for _, args := range [][]string{
		{"rules", "add", "--iface", v.Name, "drop udp dport 53"},
		{"drop", "--iface", v.Name, "--deny", "10.0.0.0/8"},
		{"detach", "--iface", v.Name},
		{"redirect", "--iface", v.Name, "--duration", "1s"},
	} {
		r := cli(t, append(args, "--lock-timeout", "200ms")...)
		requireOneLineError(t, r, 1, "interface is locked by another command")
		require.Contains(t, r.stderr, fmt.Sprintf("process %d (%s --exclusive --close %s sleep 60)", pid, flock, dir), "names the holder")
		require.Contains(t, r.stderr, fmt.Sprintf("kill %d", pid))
		require.Contains(t, r.stderr, "--lock-timeout")
	}
	r = cli(t, "rules", "add", "--iface", v.Name, "drop udp dport 53", "--lock-timeout", "-1s")
	requireOneLineError(t, r, 2, "--lock-timeout -1s")

	// Once the holder is gone, a waiting command goes ahead.
	wait := exec.Command(xdpdropBin, "rules", "add", "--iface", v.Name, "drop udp dport 53", "--lock-timeout", "30s")
	var out strings.Builder
	wait.Stdout, wait.Stderr = &out, &out
	require.NoError(t, wait.Start())
	time.Sleep(300 * time.Millisecond)
	stop()
	require.NoError(t, wait.Wait(), out.String())
	require.Contains(t, ruleTexts(t, v.Name), "drop udp dport 53")
}

// TestCLIRecreatedInterface: after an interface with fast drop attached is
// deleted and created again under the same name, its pins describe
// nothing (the link was detached with the old interface). Commands that
// need fast drop say so, naming commands that exist; `drop` removes the
// stale pins itself, says so, and attaches.
func TestCLIRecreatedInterface(t *testing.T) {
	v := sandboxForCLI(t)
	r := cli(t, "drop", "--iface", v.Name, "--deny", "10.0.0.0/8", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var res struct {
		PinDir string `json:"pin_dir"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
	require.DirExists(t, res.PinDir)

	old, err := netlink.LinkByName(v.Name)
	require.NoError(t, err)
	require.NoError(t, netlink.LinkDel(old))
	// The same names, the peer in the same namespace (removed with it).
	require.NoError(t, netlink.LinkAdd(&netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: v.Name},
		PeerName:      v.PeerName,
		PeerNamespace: netlink.NsFd(int(v.NS)),
	}))
	l, err := netlink.LinkByName(v.Name)
	require.NoError(t, err)
	require.NotEqual(t, old.Attrs().Index, l.Attrs().Index, "a new interface")
	require.NoError(t, netlink.LinkSetUp(l))
	require.DirExists(t, res.PinDir, "the old pins are still there")

	r = cli(t, "rules", "list", "--iface", v.Name)
	requireOneLineError(t, r, 1, "stale pins")
	require.Contains(t, r.stderr, "'xdpdrop drop --iface "+v.Name+" --rules FILE'")
	require.NotContains(t, r.stderr, "xdpdrop clean")
	require.NotContains(t, r.stderr, "CleanStale")

	r = cli(t, "drop", "--iface", v.Name, "--deny", "10.0.0.0/8", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "removed stale pins "+res.PinDir)
	require.Contains(t, r.stderr, "was deleted and created again")
	var res2 struct {
		Replaced bool   `json:"replaced"`
		PinDir   string `json:"pin_dir"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res2), r.stdout)
	require.False(t, res2.Replaced, "a new attachment")
	st := statusOf(t, v.Name)
	require.False(t, st.Stale)
	require.Len(t, st.Programs, 1)
	require.True(t, st.Programs[0].Ours)
	require.True(t, st.Programs[0].Pinned)
	require.Equal(t, map[string]bool{"drop src 10.0.0.0/8": true}, ruleTexts(t, v.Name))
}

// statusOf is the loader's status of one interface under the CLI's root.
func statusOf(t *testing.T, iface string) loader.IfaceStatus {
	t.Helper()
	sts, err := loader.Status(iface, "")
	require.NoError(t, err)
	require.Len(t, sts, 1)
	return sts[0]
}

package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// The JSON shapes the CLI documents, as a user's script would read them.
type jsonRule struct {
	Index   int    `json:"index"`
	Rule    string `json:"rule"`
	Kind    string `json:"kind"`
	Origin  string `json:"origin"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

type jsonStats struct {
	Interface string `json:"interface"`
	Mode      string `json:"mode"`
	Verdicts  []struct {
		Verdict string  `json:"verdict"`
		Packets uint64  `json:"packets"`
		PPS     float64 `json:"pps"`
	} `json:"verdicts"`
	Rules []jsonRule `json:"rules"`
}

func (s jsonStats) verdict(name string) uint64 {
	for _, v := range s.Verdicts {
		if v.Verdict == name {
			return v.Packets
		}
	}
	return 0
}

func (s jsonStats) rule(text string) (jsonRule, bool) {
	for _, r := range s.Rules {
		if r.Rule == text {
			return r, true
		}
	}
	return jsonRule{}, false
}

func writeRules(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "test.rules")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

// sandboxForCLI makes a veth pair and makes sure that whatever the CLI
// attaches and pins on it is gone when the test ends, pass or fail.
func sandboxForCLI(t *testing.T) *testenv.Veth {
	t.Helper()
	testenv.RequireBPFFS(t)
	v := testenv.NewVeth(t, testenv.VethOptions{})
	t.Cleanup(func() { // runs before the veth is removed
		_ = loader.DetachInterface(v.Name, loader.DetachOptions{})
	})
	return v
}

// send sends count UDP frames from the peer to dport with the CLI's gen.
func send(t *testing.T, v *testenv.Veth, count, dport string) {
	t.Helper()
	r := cli(t, "gen", "--netns", v.NSName, "--iface", v.PeerName, "--count", count, "--dport", dport, "--quiet")
	require.Equal(t, 0, r.code, r.stderr)
}

func statsJSON(t *testing.T, iface string) jsonStats {
	t.Helper()
	r := cli(t, "stats", "--iface", iface, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var s jsonStats
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
	return s
}

// TestCLIDropLifecycle is an operator's session: attach rules, see them
// catch traffic, add a rule while it runs, replace the set, detach.
func TestCLIDropLifecycle(t *testing.T) {
	v := sandboxForCLI(t)
	rules := writeRules(t, "policy pass\ndrop udp dport 11211\ndrop src 203.0.113.0/24\n")

	r := cli(t, "drop", "--iface", v.Name, "--rules", rules, "--mode", "driver", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var res struct {
		Interface string `json:"interface"`
		Mode      string `json:"mode"`
		Replaced  bool   `json:"replaced"`
		Rules     int    `json:"rules"`
		Compound  int    `json:"compound_rules"`
		Prefixes  int    `json:"prefix_rules"`
		Policy    string `json:"policy"`
		PinDir    string `json:"pin_dir"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
	require.Equal(t, v.Name, res.Interface)
	require.Equal(t, "driver", res.Mode)
	require.False(t, res.Replaced)
	require.Equal(t, 2, res.Rules)
	require.Equal(t, 1, res.Compound)
	require.Equal(t, 1, res.Prefixes)
	require.Equal(t, "pass", res.Policy)
	require.DirExists(t, res.PinDir)

	// The program outlives the command: traffic is judged by it.
	send(t, v, "1000", "11211")
	send(t, v, "500", "53")
	s := statsJSON(t, v.Name)
	memcached, ok := s.rule("drop udp dport 11211")
	require.True(t, ok, "rules: %+v", s.Rules)
	require.Equal(t, uint64(1000), memcached.Packets, "the memcached rule caught every frame to 11211")
	require.Equal(t, uint64(1000*64), memcached.Bytes)
	require.GreaterOrEqual(t, s.verdict("drop"), uint64(1000))
	require.GreaterOrEqual(t, s.verdict("pass"), uint64(500))

	// Add a rule while it runs; the other rule keeps its counters.
	r = cli(t, "rules", "add", "--iface", v.Name, "drop udp dport 53")
	require.Equal(t, 0, r.code, r.stderr)
	send(t, v, "500", "53")
	r = cli(t, "rules", "list", "--iface", v.Name, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var list struct {
		Interface string     `json:"interface"`
		Policy    string     `json:"policy"`
		Rules     []jsonRule `json:"rules"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	require.Len(t, list.Rules, 3)
	byText := map[string]jsonRule{}
	for _, jr := range list.Rules {
		byText[jr.Rule] = jr
	}
	require.Equal(t, uint64(1000), byText["drop udp dport 11211"].Packets, "adding a rule keeps the others' counters")
	require.Equal(t, uint64(500), byText["drop udp dport 53"].Packets)
	require.Equal(t, "prefix", byText["drop src 203.0.113.0/24"].Kind)

	// status shows ours, pinned, with the rule count.
	r = cli(t, "status", "--iface", v.Name, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var st []struct {
		Interface string `json:"interface"`
		Rules     *int   `json:"rules"`
		Programs  []struct {
			Mode   string `json:"mode"`
			Name   string `json:"name"`
			Ours   bool   `json:"ours"`
			Pinned bool   `json:"pinned"`
		} `json:"programs"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	require.Len(t, st, 1)
	require.Len(t, st[0].Programs, 1)
	require.True(t, st[0].Programs[0].Ours)
	require.True(t, st[0].Programs[0].Pinned)
	require.Equal(t, "driver", st[0].Programs[0].Mode)
	require.NotNil(t, st[0].Rules)
	require.Equal(t, 3, *st[0].Rules)

	// drop again: the whole set is replaced; a rule that stays keeps its counters.
	rules2 := writeRules(t, "policy drop\ndrop udp dport 11211\npass udp dport 53\n")
	r = cli(t, "drop", "--iface", v.Name, "--rules", rules2, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	require.True(t, res.Replaced)
	require.Equal(t, "drop", res.Policy)
	s = statsJSON(t, v.Name)
	memcached, _ = s.rule("drop udp dport 11211")
	require.Equal(t, uint64(1000), memcached.Packets)
	_, ok = s.rule("drop src 203.0.113.0/24")
	require.False(t, ok, "the old set's prefix rule is gone")

	// Text output is for people: a table with the rule.
	r = cli(t, "stats", "--iface", v.Name)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "drop udp dport 11211")
	require.Contains(t, r.stdout, "VERDICT")

	r = cli(t, "detach", "--iface", v.Name)
	require.Equal(t, 0, r.code, r.stderr)
	require.NoDirExists(t, res.PinDir)
	l, err := netlink.LinkByName(v.Name)
	require.NoError(t, err)
	require.False(t, l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached, "no XDP program left on the interface")
	r = cli(t, "stats", "--iface", v.Name)
	requireOneLineError(t, r, 1, "neither fast drop nor redirect runs on "+v.Name)
}

// TestCLIDropOutgrowsTables replaces a small rule set with one too big for
// the tables the program was loaded with: drop loads the program again with
// bigger tables and swaps it in, and the pins, the counters and the
// traffic all follow the new program.
func TestCLIDropOutgrowsTables(t *testing.T) {
	v := sandboxForCLI(t)
	r := cli(t, "drop", "--iface", v.Name, "--deny", "10.0.0.16/28")
	require.Equal(t, 0, r.code, r.stderr)

	// 300 /28s in 300 different /24s need 300 tbl8 groups; the first load
	// made room for 258.
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "drop src 10.%d.%d.16/28\n", 1+i/256, i%256)
	}
	r = cli(t, "drop", "--iface", v.Name, "--rules", writeRules(t, b.String()), "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var res struct {
		Replaced bool `json:"replaced"`
		Reloaded bool `json:"reloaded"`
		Rules    int  `json:"rules"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
	require.True(t, res.Replaced)
	require.True(t, res.Reloaded, "the set needs bigger tables than the first load made")
	require.Equal(t, 300, res.Rules)

	r = cli(t, "status", "--iface", v.Name, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var st []struct {
		Rules *int `json:"rules"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	require.Len(t, st, 1)
	require.NotNil(t, st[0].Rules)
	require.Equal(t, 300, *st[0].Rules, "status reads the new program's pinned maps")

	r = cli(t, "gen", "--netns", v.NSName, "--iface", v.PeerName, "--count", "1000", "--src", "10.1.7.20", "--quiet")
	require.Equal(t, 0, r.code, r.stderr)
	s := statsJSON(t, v.Name)
	hit, ok := s.rule("drop src 10.1.7.16/28")
	require.True(t, ok, "rules: %d", len(s.Rules))
	require.Equal(t, uint64(1000), hit.Packets, "the new program drops with the new rules and counts in the new maps")

	// Later changes go to the new maps; so does text output's note.
	r = cli(t, "rules", "add", "--iface", v.Name, "drop udp dport 11211")
	require.Equal(t, 0, r.code, r.stderr)
	var more strings.Builder
	for i := range 1000 { // more than the room the reload made (2x)
		fmt.Fprintf(&more, "drop src 10.%d.%d.16/28\n", 3+i/256, i%256)
	}
	r = cli(t, "rules", "replace", "--iface", v.Name, "--rules", writeRules(t, b.String()+more.String()))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "loaded again with bigger ones")
	r = cli(t, "rules", "list", "--iface", v.Name, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var list struct {
		Rules []jsonRule `json:"rules"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list.Rules, 1300)
}

func TestCLIDropBadInput(t *testing.T) {
	v := sandboxForCLI(t)
	bad := writeRules(t, "# attack\ndrop udp dport 11211\ndrop udp dprt 53\n")
	r := cli(t, "drop", "--iface", v.Name, "--rules", bad)
	requireOneLineError(t, r, 1, "test.rules:3: unknown field \"dprt\"")

	r = cli(t, "drop", "--iface", "xdnosuch0", "--deny", "192.0.2.0/24")
	requireOneLineError(t, r, 1, `interface "xdnosuch0": no such interface`)

	r = cli(t, "drop", "--iface", v.Name, "--deny", "192.0.2.0/24", "--mode", "offload")
	requireOneLineError(t, r, 1, "offload")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"drop", "--iface", v.Name, "--deny", "192.0.2.0/33"}, `--deny 192.0.2.0/33: prefix length "33" out of range (want 0-32)`},
		{[]string{"drop", "--iface", v.Name, "--deny", "192.0.2.77/24"}, "--deny 192.0.2.77/24 has bits set after the prefix length; write 192.0.2.0/24"},
		{[]string{"drop", "--iface", v.Name, "--deny", "1.2.3.4", "--mode", "turbo"}, `--mode "turbo"`},
		{[]string{"drop", "--iface", v.Name, "--deny", "1.2.3.4", "--policy", "maybe"}, `--policy "maybe": want pass or drop`},
		{[]string{"drop", "--iface", v.Name}, "give rules"},
		{[]string{"rules", "add", "--iface", v.Name, "drop udp sport"}, "argument 1"},
		{[]string{"rules", "add", "--iface", v.Name, "policy drop"}, "want exactly one rule"},
		{[]string{"rules", "replace", "--iface", v.Name, "drop udp dport 1"}, "give OLD and NEW rules"},
	} {
		requireOneLineError(t, cli(t, tc.args...), 2, tc.want)
	}

	// Commands that need fast drop say how to get it.
	r = cli(t, "rules", "list", "--iface", v.Name)
	requireOneLineError(t, r, 1, "xdpdrop drop --iface "+v.Name)

	// None of the failures above left anything on the interface or in bpffs.
	l, err := netlink.LinkByName(v.Name)
	require.NoError(t, err)
	require.False(t, l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached, "nothing attached after errors")
	require.NoDirExists(t, filepath.Join(loader.DefaultPinRoot, v.Name))
}

// TestCLIForeignProgram: a program attached by something else is never
// replaced or detached without --force, and the error says how.
func TestCLIForeignProgram(t *testing.T) {
	v := sandboxForCLI(t)
	objs := loadCount(t, gen.BasicVerdictVERDICT_PASS)
	l, err := link.AttachXDP(link.XDPOptions{Program: objs.XdpCount, Interface: v.Index, Flags: link.XDPGenericMode})
	require.NoError(t, err)
	defer l.Close()

	r := cli(t, "drop", "--iface", v.Name, "--deny", "192.0.2.0/24")
	requireOneLineError(t, r, 1, "--force")
	r = cli(t, "detach", "--iface", v.Name)
	requireOneLineError(t, r, 1, "--force")

	r = cli(t, "status", "--iface", v.Name, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"ours": false`)
	require.Contains(t, r.stdout, `"name": "xdp_count"`)
}

// TestCLINotRoot runs the CLI without privileges (with a pin root of its
// own): a one-line error that names the capabilities it lacks.
func TestCLINotRoot(t *testing.T) {
	v := sandboxForCLI(t)
	r := cliAs(t, serviceUID, "drop", "--iface", v.Name, "--deny", "192.0.2.0/24", "--pin-root", filepath.Join(serviceDir(t), "pins"))
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "this process lacks CAP_NET_ADMIN, CAP_PERFMON and CAP_BPF")
	require.NotContains(t, r.stderr, "goroutine ")
}

// TestCLIDemo runs the default sandbox briefly and checks that the mixed
// traffic hit each kind of rule and that everything it made is gone.
func TestCLIDemo(t *testing.T) {
	testenv.RequireBPFFS(t)
	r := cli(t, "demo", "--duration", "2s", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var last jsonStats
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	n := 0
	for sc.Scan() {
		require.NoError(t, json.Unmarshal(sc.Bytes(), &last), sc.Text())
		n++
	}
	require.GreaterOrEqual(t, n, 2, "a sample per second")
	for _, text := range []string{"drop udp dport 11211", "drop tcp dport 23", "drop src 203.0.0.0/16", "pass src 203.0.113.0/24", "drop src 2001:db8:bad::/48"} {
		rule, ok := last.rule(text)
		require.True(t, ok, text)
		require.Positive(t, rule.Packets, "rule %q caught traffic", text)
	}
	require.Positive(t, last.verdict("drop"))
	require.Positive(t, last.verdict("default"), "the https traffic passed by the policy")

	_, err := netlink.LinkByName(last.Interface)
	require.Error(t, err, "the demo's veth %s must be gone", last.Interface)
	left, err := filepath.Glob("/run/netns/xdpdrop-" + strings.TrimSuffix(last.Interface, "a") + "-*")
	require.NoError(t, err)
	require.Empty(t, left, "the demo's namespace must be gone")
}

// startDemo starts a long demo and returns it once its sandbox exists,
// with the sandbox's interface and namespace names.
func startDemo(t *testing.T) (cmd *exec.Cmd, iface, ns string) {
	t.Helper()
	cmd = exec.Command(xdpdropBin, "demo", "--duration", "60s")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(os.Interrupt) // lets it remove its sandbox
			_ = cmd.Wait()
		}
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		// "sandbox: IF (here) <-> PEER (namespace NS)"
		if rest, ok := strings.CutPrefix(sc.Text(), "sandbox: "); ok {
			f := strings.Fields(rest)
			require.Len(t, f, 6, sc.Text())
			iface, ns = f[0], strings.TrimSuffix(f[5], ")")
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return cmd, iface, ns
		}
	}
	t.Fatalf("demo printed no sandbox line")
	return nil, "", ""
}

// TestCLIDemoRemovesKilledDemosSandbox: a demo killed with SIGKILL leaves
// its veth and namespace; the next demo removes them, and leaves alone the
// sandbox of a demo that still runs.
func TestCLIDemoRemovesKilledDemosSandbox(t *testing.T) {
	testenv.RequireBPFFS(t)
	running, runIf, runNS := startDemo(t)
	killed, killIf, killNS := startDemo(t)
	require.NoError(t, killed.Process.Kill())
	_ = killed.Wait()
	t.Cleanup(func() { // if the demo under test does not remove them
		if l, err := netlink.LinkByName(killIf); err == nil {
			_ = netlink.LinkDel(l)
		}
		_ = exec.Command("ip", "netns", "delete", killNS).Run()
	})
	_, err := netlink.LinkByName(killIf)
	require.NoError(t, err, "SIGKILL leaves the veth")
	require.FileExists(t, "/run/netns/"+killNS)

	r := cli(t, "demo", "--duration", "1s", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "removed the sandbox (namespace "+killNS+" and its veth) that a demo which no longer runs left behind")
	require.NotContains(t, r.stderr, runNS)
	_, err = netlink.LinkByName(killIf)
	require.Error(t, err, "the killed demo's veth %s is gone", killIf)
	require.NoFileExists(t, "/run/netns/"+killNS)

	_, err = netlink.LinkByName(runIf)
	require.NoError(t, err, "the running demo's veth is still there")
	require.FileExists(t, "/run/netns/"+runNS)
	require.NoError(t, running.Process.Signal(os.Interrupt))
	require.NoError(t, running.Wait(), "the running demo was not disturbed")
	_, err = netlink.LinkByName(runIf)
	require.Error(t, err, "and removed its own sandbox on exit")
}

// TestCLINoBPFFS runs drop where bpffs is absent and cannot be mounted (a
// private mount namespace with a read-only /sys/fs): a clear error, and
// nothing attached.
func TestCLINoBPFFS(t *testing.T) {
	v := sandboxForCLI(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.SkipOrFail(t, "needs unshare(1) from util-linux")
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs -o ro tmpfs /sys/fs && exec "$0" "$@"`, xdpdropBin, "drop", "--iface", v.Name, "--deny", "192.0.2.0/24")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	require.Equal(t, 1, ee.ExitCode(), "%s", out)
	require.Contains(t, string(out), "bpf")
	require.Contains(t, string(out), "mount -t bpf bpf /sys/fs/bpf", "the error says how to fix it")
	require.NotContains(t, string(out), "goroutine ")

	l, err := netlink.LinkByName(v.Name)
	require.NoError(t, err)
	require.False(t, l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached, "nothing left attached")
}

// TestCLIDropOverCapacity: a rule set beyond what one program holds is
// refused before anything is loaded, with the limit, the count and what
// to do (it was a verifier dump and a privilege hint), and nothing is
// attached.
func TestCLIDropOverCapacity(t *testing.T) {
	v := sandboxForCLI(t)
	// fastdrop.MaxRules+1 host routes, 10.0.0.0 upwards.
	n := fastdrop.MaxRules + 1
	path := filepath.Join(t.TempDir(), "big.rules")
	f, err := os.Create(path)
	require.NoError(t, err)
	w := bufio.NewWriterSize(f, 1<<20)
	line := make([]byte, 0, 32)
	for i := range n {
		a := 10<<24 | uint32(i)
		line = append(line[:0], "drop src "...)
		for j, shift := range []uint{24, 16, 8, 0} {
			if j > 0 {
				line = append(line, '.')
			}
			line = strconv.AppendUint(line, uint64(a>>shift&0xff), 10)
		}
		w.Write(append(line, '\n'))
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())

	start := time.Now()
	r := cli(t, "drop", "--iface", v.Name, "--rules", path)
	requireOneLineError(t, r, 1, fmt.Sprintf("big.rules:%d: too many rules: this is rule number %d, and one fast-drop program holds at most %d; aggregate adjacent prefixes into shorter ones", n, n, fastdrop.MaxRules))
	require.NotContains(t, r.stderr, "CAP_", "no privilege hint")
	require.NotContains(t, r.stderr, "verifier")
	t.Logf("refused in %v", time.Since(start))

	l, err := netlink.LinkByName(v.Name)
	require.NoError(t, err)
	require.False(t, l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached, "nothing attached")
	_, err = os.Stat(filepath.Join(loader.DefaultPinRoot, v.Name))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing pinned")
}

// TestCLIEmptyRuleFile: a rule file with no rules attaches, and says so:
// 0 rules, policy pass, as every attach and replace message does.
func TestCLIEmptyRuleFile(t *testing.T) {
	v := sandboxForCLI(t)
	empty := writeRules(t, "# nothing yet\n\n")
	r := cli(t, "drop", "--iface", v.Name, "--rules", empty)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "attached fast drop to "+v.Name)
	require.Contains(t, r.stdout, ": 0 rules (0 compound, 0 prefix), policy pass, malformed pass")

	r = cli(t, "rules", "replace", "--iface", v.Name, "--rules", empty)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "replaced the rule set on "+v.Name+": 0 rules (0 compound, 0 prefix), policy pass, malformed pass\n", r.stdout)
}

// TestCLIDropMemory: loading 1M prefix rules, and replacing them with
// another million, peaks well under 1 GiB of resident memory (it was 1.1
// and 1.5 GB, most of it the maps mapped whole; see docs/BENCHMARKS.md).
func TestCLIDropMemory(t *testing.T) {
	v := sandboxForCLI(t)
	write := func(name string, seed uint32) string {
		path := filepath.Join(t.TempDir(), name)
		f, err := os.Create(path)
		require.NoError(t, err)
		w := bufio.NewWriterSize(f, 1<<20)
		// 1M distinct prefixes: /24s, and every 20th a /28 inside one.
		x := seed
		seen := make(map[uint32]bool, 1_000_000)
		for len(seen) < 1_000_000 {
			x = x*1664525 + 1013904223
			a, bits := x&0xffffff00, 24
			if x%20 == 0 {
				a, bits = x&0xfffffff0, 28
			}
			if seen[a|uint32(bits)] {
				continue
			}
			seen[a|uint32(bits)] = true
			fmt.Fprintf(w, "drop src %d.%d.%d.%d/%d\n", a>>24, a>>16&255, a>>8&255, a&255, bits)
		}
		require.NoError(t, w.Flush())
		require.NoError(t, f.Close())
		return path
	}
	for _, path := range []string{write("a.rules", 1), write("b.rules", 2)} {
		cmd := exec.Command(xdpdropBin, "drop", "--iface", v.Name, "--rules", path)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "1000000 rules")
		maxRSS := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB
		t.Logf("%s: peak RSS %d MiB", filepath.Base(path), maxRSS>>10)
		require.Less(t, maxRSS, int64(1<<20), "peak RSS of %s under 1 GiB", filepath.Base(path))
	}
}

// TestCLIRulesAsWritten: rules list, stats (text and JSON) and rules add
// show each compound rule exactly as its file (or the command line) has it,
// fields in the order written, names, flags, lists, comparisons, rates
// and an IPv6 prefix offset as written, from processes other than the one
// that attached (the pinned program), also after a rule is added; blanks
// and comments are what is normalised. Prefix rules print with the
// length. A rule written otherwise is another rule.
func TestCLIRulesAsWritten(t *testing.T) {
	v := sandboxForCLI(t)
	written := []string{
		"drop dport 11211 udp",
		"drop dport 80 tcp flags !ack,syn",
		"drop icmp type echo-request",
		"drop dscp ef proto 6",
		"drop udp dport 53,123,0-10 ttl <3",
		"drop proto 17 len >1024",
		"drop ether 0x88CC",
		"limit 1k/s udp sport 19",
		"drop dst ::1:1234:5678:9800:0/104/60 udp",
	}
	file := "policy pass\n" + strings.Join(written[:4], "   \t # a comment\n") + "\n" +
		strings.Join(written[4:], "\n") + "\ndrop src 203.0.113.7\n"
	r := cli(t, "drop", "--iface", v.Name, "--rules", writeRules(t, file), "--mode", "driver")
	require.Equal(t, 0, r.code, r.stderr)
	send(t, v, "100", "11211")

	list := func() []jsonRule {
		t.Helper()
		r := cli(t, "rules", "list", "--iface", v.Name, "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var l struct {
			Rules []jsonRule `json:"rules"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &l), r.stdout)
		return l.Rules
	}
	texts := func(rs []jsonRule) []string {
		var s []string
		for _, jr := range rs {
			s = append(s, jr.Rule)
		}
		return s
	}
	want := append(slices.Clone(written), "drop src 203.0.113.7/32")
	require.Equal(t, want, texts(list()), "rules list --json")
	s := statsJSON(t, v.Name)
	require.Equal(t, want, texts(s.Rules), "stats --json")
	memcached, ok := s.rule("drop dport 11211 udp")
	require.True(t, ok)
	require.Equal(t, uint64(100), memcached.Packets, "the rule as written counts its frames")
	r = cli(t, "rules", "list", "--iface", v.Name)
	require.Equal(t, 0, r.code, r.stderr)
	for _, w := range written {
		require.Contains(t, r.stdout, w, "rules list")
	}
	r = cli(t, "stats", "--iface", v.Name) // the rules that matched
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "drop dport 11211 udp")

	// A rule added from the command line, as typed; the others keep
	// their text and counters.
	r = cli(t, "rules", "add", "--iface", v.Name, "pass   dport 22 tcp src 198.51.100.0/24")
	require.Equal(t, 0, r.code, r.stderr)
	got := list()
	require.Equal(t, append(slices.Clone(want), "pass dport 22 tcp src 198.51.100.0/24"), texts(got))
	require.Equal(t, uint64(100), got[0].Packets)
	// rules del finds a rule however it is written.
	r = cli(t, "rules", "del", "--iface", v.Name, "drop udp dport 11211")
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, texts(list()), "drop dport 11211 udp")

	// The same rule written otherwise is another rule: its text is the
	// new one, its counters start again.
	r = cli(t, "drop", "--iface", v.Name, "--rules", writeRules(t, "drop dport 80 flags !ack,syn tcp\ndrop udp dport 11211\n"))
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, []string{"drop dport 80 flags !ack,syn tcp", "drop udp dport 11211"}, texts(list()))
}

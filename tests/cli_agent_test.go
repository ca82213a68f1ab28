package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// agentStatus is the part of the agent's status JSON the tests read.
type agentStatus struct {
	Ready      bool `json:"ready"`
	Interfaces []struct {
		Name         string   `json:"name"`
		InForce      bool     `json:"in_force"`
		Policy       string   `json:"policy"`
		FileOrigin   string   `json:"file_origin"`
		BGPOrigin    string   `json:"bgp_origin"`
		FileRules    int      `json:"file_rules"`
		BGPRules     int      `json:"bgp_rules"`
		RefusedRules []string `json:"refused_rules"`
		Refused      int      `json:"refused"`
		Applied      string   `json:"applied"`
		Error        string   `json:"error"`
	} `json:"interfaces"`
	Files []struct {
		Path  string `json:"path"`
		Rules int    `json:"rules"`
		Error string `json:"error"`
	} `json:"files"`
	BGP *struct {
		Neighbors []struct {
			Address string `json:"address"`
			Up      bool   `json:"up"`
		} `json:"neighbors"`
		Refused int `json:"routes_refused"`
		Stale   int `json:"routes_stale"`
		Routes  []struct {
			NLRI   string `json:"nlri"`
			State  string `json:"state"`
			Reason string `json:"reason"`
		} `json:"routes"`
	} `json:"bgp"`
}

func readAgentStatus(t *testing.T, path string) agentStatus {
	t.Helper()
	var s agentStatus
	b, err := os.ReadFile(path)
	if err != nil {
		return s
	}
	require.NoError(t, json.Unmarshal(b, &s), string(b))
	return s
}

func waitAgent(t *testing.T, path, what string, ok func(agentStatus) bool) agentStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := readAgentStatus(t, path)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(path)
			t.Fatalf("%s: not within 20s; status: %s", what, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startAgent runs `xdpdrop agent --config` in the background, killed by
// pid when the test ends.
func startAgent(t *testing.T, config string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	var logb bytes.Buffer
	cmd := exec.Command(xdpdropBin, "agent", "--config", config)
	cmd.Stderr = &logb
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agent log:\n%s", logb.String())
		}
	})
	return cmd, &logb
}

// TestCLIAgentRuleFiles: the agent attaches with its rule file, follows
// the file when it changes, keeps the last good rules when it fails to
// parse (and says so in status), and leaves the rules in force when it
// is killed.
func TestCLIAgentRuleFiles(t *testing.T) {
	v := sandboxForCLI(t)
	dir := t.TempDir()
	rules := filepath.Join(dir, "base.rules")
	require.NoError(t, os.WriteFile(rules, []byte("drop udp dport 7001\n"), 0o600))
	status := filepath.Join(dir, "status.json")
	cfg := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
interfaces:
  - name: %s
    rule_files: [%s]
    rules: |
      drop udp dport 7003
status:
  file: %s
`, v.Name, rules, status)), 0o600))
	r := cli(t, "agent", "--check", cfg)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, v.Name+": 2 rules (2 compound, 0 prefix), policy pass")

	agent, _ := startAgent(t, cfg)
	waitAgent(t, status, "rules in force", func(s agentStatus) bool { return s.Ready })
	send(t, v, "10", "7001")
	send(t, v, "10", "7002")
	st := statsJSON(t, v.Name)
	require.Equal(t, uint64(10), st.verdict("drop"))

	// A broken file: the last good rules stay, status says why.
	require.NoError(t, os.WriteFile(rules, []byte("drop udp dport 70001\n"), 0o600))
	s := waitAgent(t, status, "file error in status", func(s agentStatus) bool { return len(s.Files) == 1 && s.Files[0].Error != "" })
	require.Contains(t, s.Files[0].Error, "base.rules:1:")
	require.Equal(t, 1, s.Files[0].Rules)
	send(t, v, "10", "7001")
	require.Equal(t, uint64(20), statsJSON(t, v.Name).verdict("drop"))

	// Fixed, by rename as config management does: the new rules.
	tmp := rules + ".new"
	require.NoError(t, os.WriteFile(tmp, []byte("drop udp dport 7002\n"), 0o600))
	require.NoError(t, os.Rename(tmp, rules))
	waitAgent(t, status, "new file rules", func(s agentStatus) bool {
		return len(s.Interfaces) == 1 && s.Files[0].Error == "" && s.Interfaces[0].FileRules == 2
	})
	rl := listRules(t, v.Name)
	require.Len(t, rl, 2, "%v", rl)
	require.Equal(t, "agent:file", rl["drop udp dport 7002"].Origin)
	require.Equal(t, "agent:file", rl["drop udp dport 7003"].Origin)
	send(t, v, "10", "7001")
	send(t, v, "10", "7002")
	st = statsJSON(t, v.Name)
	require.Equal(t, uint64(30), st.verdict("drop"))

	// kill -9: the rule set stays in force.
	require.NoError(t, agent.Process.Signal(syscall.SIGKILL))
	_ = agent.Wait()
	send(t, v, "10", "7002")
	require.Equal(t, uint64(40), statsJSON(t, v.Name).verdict("drop"))
}

// TestCLIAgentExaBGP: ExaBGP (Python, from Debian) announces FlowSpec
// routes to the agent over loopback on a port the test chose; the veth
// drops exactly the traffic a route describes, passes it again after the
// withdrawal, refuses and lists a route it cannot express, and removes
// the rules of a lost session when the stale time ends.
func TestCLIAgentExaBGP(t *testing.T) {
	exabgp, err := exec.LookPath("exabgp")
	if err != nil {
		testenv.SkipOrFail(t, "exabgp is not installed (Debian package exabgp; .ci/run installs it)")
	}
	v := sandboxForCLI(t)
	dir := t.TempDir()
	status := filepath.Join(dir, "status.json")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
interfaces:
  - name: %s
    policy: pass
status:
  file: %s
debounce: 20ms
bgp:
  local_as: 65001
  router_id: 127.0.0.1
  listen_addresses: [127.0.0.1]
  listen_port: %d
  stale_time: 3s
  neighbors:
    - address: 127.0.0.3
      as: 65000
      passive: true
`, v.Name, status, port)), 0o600))
	startAgent(t, cfg)
	waitAgent(t, status, "agent ready", func(s agentStatus) bool { return s.Ready })

	// ExaBGP reads its API commands from a file it follows (tail -F).
	cmds := filepath.Join(dir, "exabgp.cmds")
	require.NoError(t, os.WriteFile(cmds, nil, 0o600))
	exacfg := filepath.Join(dir, "exabgp.conf")
	require.NoError(t, os.WriteFile(exacfg, []byte(fmt.Sprintf(`
process announce {
    run /usr/bin/tail -n +1 -F %s;
    encoder text;
}
neighbor 127.0.0.1 {
    router-id 127.0.0.3;
    local-address 127.0.0.3;
    local-as 65000;
    peer-as 65001;
    connect %d;
    family { ipv4 flow; }
    api { processes [ announce ]; }
}
`, cmds, port)), 0o600))
	var exalog bytes.Buffer
	ex := exec.Command(exabgp, exacfg)
	ex.Env = append(os.Environ(), "exabgp.daemon.user=root", "exabgp.daemon.daemonize=false", "exabgp.log.destination=stdout", "exabgp.api.cli=false")
	ex.Stdout, ex.Stderr = &exalog, &exalog
	ex.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its tail goes with it
	require.NoError(t, ex.Start())
	killExa := func() {
		_ = syscall.Kill(-ex.Process.Pid, syscall.SIGKILL)
		_ = ex.Wait()
	}
	t.Cleanup(func() {
		killExa()
		if t.Failed() {
			t.Logf("exabgp log:\n%s", exalog.String())
		}
	})
	command := func(line string) {
		f, err := os.OpenFile(cmds, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString(line + "\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	waitAgent(t, status, "session up", func(s agentStatus) bool { return s.BGP != nil && len(s.BGP.Neighbors) == 1 && s.BGP.Neighbors[0].Up })

	const match = "match { destination 198.18.0.1/32; protocol udp; destination-port =7777; }"
	command("announce flow route { " + match + " then { discard; } }")
	command("announce flow route { match { destination 10.9.0.0/16; } then { redirect 65000:7; } }")
	// As the agent writes it: in the route's component order (RFC 8955: destination, protocol, port).
	want := "drop ether ipv4 dst 198.18.0.1/32 udp dport 7777"
	s := waitAgent(t, status, "FlowSpec rule in force", func(s agentStatus) bool {
		return len(s.Interfaces) == 1 && s.Interfaces[0].BGPRules == strings.Count(want, ";")+1 && s.BGP.Refused == 1
	})
	for _, r := range s.BGP.Routes {
		if r.State == "refused" {
			require.Contains(t, r.Reason, "redirect to VRF")
		}
	}
	send(t, v, "20", "7777")
	send(t, v, "20", "7778")
	st := statsJSON(t, v.Name)
	require.Equal(t, uint64(20), st.verdict("drop"))
	rule, ok := st.rule(want)
	require.True(t, ok, "rule %q in stats", want)
	require.Equal(t, uint64(20), rule.Packets)
	require.Equal(t, "agent:flowspec", listRules(t, v.Name)[want].Origin)

	command("withdraw flow route { " + match + " then { discard; } }")
	waitAgent(t, status, "withdrawn", func(s agentStatus) bool { return s.Interfaces[0].BGPRules == 0 })
	send(t, v, "20", "7777")
	require.Equal(t, uint64(20), statsJSON(t, v.Name).verdict("drop"))

	// Announced again, then the speaker dies: kept for the stale time.
	command("announce flow route { " + match + " then { discard; } }")
	waitAgent(t, status, "announced again", func(s agentStatus) bool { return s.Interfaces[0].BGPRules == 1 })
	killExa()
	waitAgent(t, status, "session down, stale", func(s agentStatus) bool { return !s.BGP.Neighbors[0].Up && s.BGP.Stale == 2 })
	down := time.Now()
	send(t, v, "20", "7777")
	require.Equal(t, uint64(40), statsJSON(t, v.Name).verdict("drop"), "stale rules in force")
	waitAgent(t, status, "stale rules removed", func(s agentStatus) bool { return s.Interfaces[0].BGPRules == 0 })
	require.GreaterOrEqual(t, time.Since(down), 2*time.Second, "removed before the stale time")
	send(t, v, "20", "7777")
	require.Equal(t, uint64(40), statsJSON(t, v.Name).verdict("drop"))
}

// TestCLIAgentBesideOtherOrigins: the agent shares an interface with
// xdpdrop drop, xdpdrop rules add and xdpdrop redirect. Its swaps change
// only its own rules (origin agent:file): the others' rules stay in force
// and keep counting; a file prefix rule that another origin holds already
// is refused and listed in status, and the other's rule stays.
func TestCLIAgentBesideOtherOrigins(t *testing.T) {
	v := sandboxForCLI(t)
	r := cli(t, "drop", "--iface", v.Name, "--mode", "driver", "--rules", writeRules(t, "policy pass\ndrop udp dport 7101\n"))
	require.Equal(t, 0, r.code, r.stderr)
	r = cli(t, "rules", "add", "--iface", v.Name, "drop src 198.51.100.7/32")
	require.Equal(t, 0, r.code, r.stderr)
	red, rederr := startRedirect(t, v, "--queues", "all", "--action", "count", "--filter", writeRules(t, "redirect udp dport 7300\n"))

	dir := t.TempDir()
	rules := filepath.Join(dir, "agent.rules")
	require.NoError(t, os.WriteFile(rules, []byte("drop udp dport 7201\ndrop src 198.51.100.7/32\ndrop src 203.0.113.0/24\n"), 0o600))
	status := filepath.Join(dir, "status.json")
	cfg := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
interfaces:
  - name: %s
    rule_files: [%s]
status:
  file: %s
`, v.Name, rules, status)), 0o600))
	startAgent(t, cfg)
	s := waitAgent(t, status, "rules in force", func(s agentStatus) bool { return s.Ready })
	is := s.Interfaces[0]
	require.Equal(t, 2, is.FileRules, "the colliding prefix rule is not the agent's")
	require.Equal(t, 1, is.Refused)
	require.Len(t, is.RefusedRules, 1)
	require.Contains(t, is.RefusedRules[0], "drop src 198.51.100.7/32: prefix 198.51.100.7/32 on "+v.Name+" is a rule of origin drop already")
	require.Equal(t, "agent:file", is.FileOrigin)
	require.True(t, strings.HasPrefix(is.Policy, "pass/"), "policy %s: the drop command's, the agent's files name none", is.Policy)

	want := map[string]string{
		"drop udp dport 7101":      "drop",
		"drop src 198.51.100.7/32": "drop",
		"redirect udp dport 7300":  "redirect",
		"drop udp dport 7201":      "agent:file",
		"drop src 203.0.113.0/24":  "agent:file",
	}
	origins := func() map[string]string {
		out := map[string]string{}
		for text, jr := range listRules(t, v.Name) {
			out[text] = jr.Origin
		}
		return out
	}
	require.Equal(t, want, origins())

	// The file changes: the agent swaps its own rules only.
	tmp := rules + ".new"
	require.NoError(t, os.WriteFile(tmp, []byte("drop udp dport 7202\n"), 0o600))
	require.NoError(t, os.Rename(tmp, rules))
	waitAgent(t, status, "new file rules", func(s agentStatus) bool { return s.Interfaces[0].FileRules == 1 && s.Interfaces[0].Refused == 0 })
	delete(want, "drop udp dport 7201")
	delete(want, "drop src 203.0.113.0/24")
	want["drop udp dport 7202"] = "agent:file"
	require.Equal(t, want, origins())

	send(t, v, "10", "7101")
	send(t, v, "20", "7202")
	send(t, v, "30", "7300")
	send(t, v, "40", "7201") // the agent's old rule: gone, policy pass
	rl := listRules(t, v.Name)
	require.Equal(t, uint64(10), rl["drop udp dport 7101"].Packets, "the drop command's rule stays in force")
	require.Equal(t, uint64(20), rl["drop udp dport 7202"].Packets)
	require.Equal(t, uint64(30), rl["redirect udp dport 7300"].Packets, "the redirect's rule stays in force")
	require.Equal(t, uint64(30), statsJSON(t, v.Name).verdict("drop"))
	qs := stopRedirect(t, red, rederr)
	require.Equal(t, uint64(30), total(qs, func(q jsonQueue) uint64 { return q.RxFrames }), "the redirect's frames reached its socket")
	// The redirect is gone; the agent's next swap keeps the drop command's rules.
	require.NoError(t, os.WriteFile(tmp, []byte("drop udp dport 7203\n"), 0o600))
	require.NoError(t, os.Rename(tmp, rules))
	delete(want, "redirect udp dport 7300")
	delete(want, "drop udp dport 7202")
	want["drop udp dport 7203"] = "agent:file"
	// Until the agent's swap is in force; if it never is, say which rule
	// stayed (or is missing), and what the agent's status said.
	var got map[string]string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if got = origins(); len(got) == len(want) && got["drop udp dport 7203"] != "" {
			break
		}
		if time.Now().After(deadline) {
			var stayed, missing []string
			for text, o := range got {
				if want[text] != o {
					stayed = append(stayed, o+": "+text)
				}
			}
			for text, o := range want {
				if got[text] != o {
					missing = append(missing, o+": "+text)
				}
			}
			b, _ := os.ReadFile(status)
			t.Fatalf("after the redirect stopped and the file changed, rules in force that should not be: %q; missing: %q\nagent status: %s", stayed, missing, b)
		}
	}
	require.Equal(t, want, got)
	require.Equal(t, uint64(10), listRules(t, v.Name)["drop udp dport 7101"].Packets, "counters of the others' rules kept")
}

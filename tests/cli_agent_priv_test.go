package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// unitCaps returns the AmbientCapabilities of the agent's systemd unit in
// setpriv's spelling (CAP_BPF -> bpf).
func unitCaps(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "deploy", "xdpdrop-agent.service"))
	require.NoError(t, err)
	var caps []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "AmbientCapabilities="); ok {
			for _, c := range strings.Fields(v) {
				caps = append(caps, strings.ToLower(strings.TrimPrefix(c, "CAP_")))
			}
		}
	}
	require.NotEmpty(t, caps, "the unit sets AmbientCapabilities")
	return caps
}

// freePrivilegedPort finds a TCP port below 1024 free on 127.0.0.1 (root
// may bind it; the test's service user needs CAP_NET_BIND_SERVICE).
func freePrivilegedPort(t *testing.T) int {
	t.Helper()
	for range 50 {
		p := 600 + rand.IntN(400)
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free TCP port in 600-999 on 127.0.0.1")
	return 0
}

// serviceTempDir is a directory the service user owns, outside the test's
// own (mode 0700) temporary directory.
func serviceTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "xdpdrop-agent-svc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	require.NoError(t, os.Chmod(d, 0o755))
	require.NoError(t, os.Chown(d, serviceUID, serviceUID))
	return d
}

// TestCLIAgentLeastPrivilege runs the agent as the unprivileged service
// user holding exactly the capabilities of deploy/xdpdrop-agent.service
// (as systemd would give them), with BGP listening on a port below 1024:
// it attaches to the veth, filters what its rule file says, serves BGP,
// and writes its status; one capability fewer and it cannot attach.
func TestCLIAgentLeastPrivilege(t *testing.T) {
	caps := unitCaps(t)
	v := testenv.NewVeth(t, testenv.VethOptions{})
	pins := filepath.Join(serviceDir(t), "pins")
	dir := serviceTempDir(t)
	rules := filepath.Join(dir, "base.rules")
	require.NoError(t, os.WriteFile(rules, []byte("drop udp dport 7001\n"), 0o644))
	status := filepath.Join(dir, "status.json")
	port := freePrivilegedPort(t)
	cfg := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
interfaces:
  - name: %s
    rule_files: [%s]
status:
  file: %s
bgp:
  local_as: 65001
  router_id: 127.0.0.1
  listen_addresses: [127.0.0.1]
  listen_port: %d
  neighbors:
    - address: 127.0.0.3
      as: 65000
      passive: true
`, v.Name, rules, status, port)), 0o644))

	var logb bytes.Buffer
	cmd := setprivCmd(t, caps, xdpdropBin, "agent", "--config", cfg, "--pin-root", pins)
	cmd.Stderr = &logb
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agent log:\n%s", logb.String())
		}
	})
	s := waitAgent(t, status, "rules in force", func(s agentStatus) bool { return s.Ready })
	require.Equal(t, 1, s.Interfaces[0].FileRules)
	require.Empty(t, s.Interfaces[0].Error)

	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err, "the agent's BGP speaker listens on port %d", port)
	c.Close()

	send(t, v, "10", "7001")
	send(t, v, "10", "7002")
	r := cliCaps(t, nil, "stats", "--iface", v.Name, "--pin-root", pins, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var st jsonStats
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	require.Equal(t, uint64(10), st.verdict("drop"))
	rule, ok := st.rule("drop udp dport 7001")
	require.True(t, ok, r.stdout)
	require.Equal(t, uint64(10), rule.Packets)

	// xdpdrop status shows the agent's state from its status file.
	r = cliCaps(t, nil, "status", "--iface", v.Name, "--pin-root", pins, "--agent-status", status, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var rows []struct {
		Interface string `json:"interface"`
		Rules     *int   `json:"rules"`
		Agent     *struct {
			StatusFile string `json:"status_file"`
			Ready      bool   `json:"ready"`
			InForce    bool   `json:"in_force"`
			FileRules  int    `json:"file_rules"`
			BGPRules   int    `json:"bgp_rules"`
			BGP        *struct {
				Received  int `json:"routes_received"`
				Neighbors []struct {
					Address string `json:"address"`
					AS      uint32 `json:"as"`
					State   string `json:"state"`
					Up      bool   `json:"up"`
				} `json:"neighbors"`
			} `json:"bgp"`
		} `json:"agent"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows), r.stdout)
	require.Len(t, rows, 1)
	ag := rows[0].Agent
	require.NotNil(t, ag, r.stdout)
	require.Equal(t, status, ag.StatusFile)
	require.True(t, ag.Ready && ag.InForce)
	require.Equal(t, 1, ag.FileRules)
	require.Equal(t, 0, ag.BGPRules)
	require.NotNil(t, ag.BGP)
	require.Len(t, ag.BGP.Neighbors, 1)
	require.Equal(t, "127.0.0.3", ag.BGP.Neighbors[0].Address)
	require.Equal(t, uint32(65000), ag.BGP.Neighbors[0].AS)
	require.False(t, ag.BGP.Neighbors[0].Up)
	require.NotEmpty(t, ag.BGP.Neighbors[0].State)
	r = cliCaps(t, nil, "status", "--iface", v.Name, "--pin-root", pins, "--agent-status", status)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "agent ("+status+", written ")
	require.Contains(t, r.stdout, v.Name+": 1 file rules (origin agent:file), 0 bgp rules (origin agent:flowspec) in force")
	require.Contains(t, r.stdout, "bgp: AS 65001, router id 127.0.0.1; routes received 0, accepted 0, refused 0, stale 0")
	require.Regexp(t, `127\.0\.0\.3\s+65000\s+`+ag.BGP.Neighbors[0].State+`\s`, r.stdout)
	r = cliCaps(t, nil, "status", "--iface", v.Name, "--pin-root", pins, "--agent-status", filepath.Join(dir, "none.json"))
	requireOneLineError(t, r, 1, "read the agent's status")

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	// Without CAP_PERFMON (one of the set) the agent cannot attach to a
	// fresh interface, and says which capability it lacks.
	v2 := testenv.NewVeth(t, testenv.VethOptions{})
	status2 := filepath.Join(dir, "status2.json")
	cfg2 := filepath.Join(dir, "agent2.yaml")
	require.NoError(t, os.WriteFile(cfg2, []byte(fmt.Sprintf("interfaces:\n  - name: %s\n    rule_files: [%s]\nstatus:\n  file: %s\n", v2.Name, rules, status2)), 0o644))
	var fewer []string
	for _, c := range caps {
		if c != "perfmon" {
			fewer = append(fewer, c)
		}
	}
	require.Len(t, fewer, len(caps)-1, "the unit holds CAP_PERFMON")
	cmd2 := setprivCmd(t, fewer, xdpdropBin, "agent", "--config", cfg2, "--pin-root", pins)
	var log2 bytes.Buffer
	cmd2.Stderr = &log2
	require.NoError(t, cmd2.Start())
	t.Cleanup(func() { _ = cmd2.Process.Kill(); _ = cmd2.Wait() })
	s = waitAgent(t, status2, "an error in status", func(s agentStatus) bool { return len(s.Interfaces) == 1 && s.Interfaces[0].Error != "" })
	require.False(t, s.Ready)
	require.Contains(t, s.Interfaces[0].Error, "this process lacks CAP_PERFMON")
	requireNothingAttached(t, v2.Name)
}

package agent

import (
	"strings"
	"testing"
)

// Unknown keys and bad values are errors that name the line or the key,
// and no Go type.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"interfaces:\n  - name: eth3\n    rulez: x\n", "line 3: unknown key rulez"},
		{"interfaces:\n  - name: eth3\n    policy: pass\nbgp:\n  local_as: 1\n  routerid: 1.2.3.4\n", "line 6: unknown key routerid"},
		{"interfaces:\n  - name: eth3\n    policy: pass\nlock_timeout: soon\n", "line 4: cannot unmarshal"},
		{"", "the config is empty"},
		{"interfaces:\n  - name: eth3\n    mode: fast\n    policy: pass\n", `mode "fast": want driver, generic or auto`},
		{"interfaces:\n  - name: eth3\n    rules: \"drop udp dport 99999\"\n", "interface eth3 rules:1:"},
		{"interfaces:\n  - name: eth3\n", "eth3 has no rules"},
		{"interfaces:\n  - name: eth3\nbgp:\n  local_as: 1\n  router_id: 10.0.0.1\n  neighbors:\n    - address: 10.0.0.2\n      as: 2\n      families: [ipv4-unicast]\n", `family "ipv4-unicast"`},
		{"interfaces:\n  - name: eth3\nbgp:\n  local_as: 1\n  router_id: 10.0.0.1\n  interfaces: [eth4]\n  neighbors:\n    - {address: 10.0.0.2, as: 2}\n", "eth4 is not one of the interfaces"},
		{"interfaces:\n  - name: eth3\nbgp:\n  local_as: 1\n  router_id: 10.0.0.1\n  max_rules: 2000000\n  neighbors:\n    - {address: 10.0.0.2, as: 2}\n", "max_rules 2000000"},
		{"interfaces:\n  - name: eth3\nbgp:\n  local_as: 1\n  router_id: 10.0.0.1\n  sample_one_in: 2000000000\n  neighbors:\n    - {address: 10.0.0.2, as: 2}\n", "sample_one_in 2000000000: want 1-1073741824"},
	} {
		_, err := ParseConfig([]byte(tc.yaml), "agent.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "agent.Config") || strings.Contains(err.Error(), "time.Duration") || strings.Contains(err.Error(), "\n") {
			t.Errorf("error names Go types or has several lines: %q", err)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]byte("interfaces:\n  - name: eth3\nbgp:\n  local_as: 65001\n  router_id: 192.0.2.10\n  neighbors:\n    - address: 192.0.2.1\n      as: 65000\n"), "agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Interfaces[0].Mode != "auto" || c.BGP.ListenPort != 179 || c.BGP.MaxRules != DefaultMaxBGPRules || len(c.BGP.Neighbors[0].Families) != 2 || c.BGP.SampleOneIn != DefaultSampleOneIn {
		t.Errorf("defaults: %+v %+v", c.Interfaces[0], *c.BGP)
	}
}

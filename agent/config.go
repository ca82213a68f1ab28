package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/loader"
)

// Config is the agent's configuration file (docs/AGENT.md has a full
// example). Field names are the YAML keys.
type Config struct {
	// PinRoot is the bpffs directory of the pins ("" = xdpdrop's default,
	// the one every other xdpdrop command uses).
	PinRoot string `yaml:"pin_root"`
	// Status says where the agent publishes its state.
	Status StatusConfig `yaml:"status"`
	// Interfaces are the interfaces the agent filters.
	Interfaces []InterfaceConfig `yaml:"interfaces"`
	// BGP configures the embedded BGP speaker; nil: no BGP.
	BGP *BGPConfig `yaml:"bgp"`
	// LockTimeout is how long a rule swap waits for the interface's lock
	// (held by another xdpdrop command). Default 10s.
	LockTimeout time.Duration `yaml:"lock_timeout"`
	// Debounce is how long the agent waits after a change for more before
	// it swaps the rule sets: a burst of announcements becomes one swap.
	// Default 50ms.
	Debounce time.Duration `yaml:"debounce"`

	path string // the file it was read from, for messages
}

// DefaultStatusFile is where xdpdrop status looks for the agent's status
// file unless told otherwise; the systemd unit and the DaemonSet configure
// the agent to write it there.
const DefaultStatusFile = "/run/xdpdrop/agent.json"

// StatusConfig says where the agent's state is published.
type StatusConfig struct {
	// Listen is a TCP address for HTTP: /status (JSON), /healthz (200 once
	// every interface has its rules), /metrics (Prometheus). "" = none.
	Listen string `yaml:"listen"`
	// File is written with the status JSON after every change ("" =
	// none).
	File string `yaml:"file"`
}

// InterfaceConfig is one interface the agent filters.
type InterfaceConfig struct {
	Name string `yaml:"name"`
	// Mode is driver, generic or auto (default), as `xdpdrop drop --mode`.
	Mode string `yaml:"mode"`
	// Policy is the verdict when no rule matches: pass (default) or drop.
	// It overrides the policy lines of the rule files.
	Policy string `yaml:"policy"`
	// Malformed is the verdict for frames that cannot be parsed.
	Malformed string `yaml:"malformed"`
	// RuleFiles are rule files (docs/RULES.md), in order; each is watched
	// and reloaded when it changes.
	RuleFiles []string `yaml:"rule_files"`
	// Rules are inline rules, one per line, after those of the files.
	Rules string `yaml:"rules"`
	// Force replaces an XDP program that is not xdpdrop's.
	Force bool `yaml:"force"`
}

// BGPConfig configures the embedded BGP speaker.
type BGPConfig struct {
	LocalAS  uint32 `yaml:"local_as"`
	RouterID string `yaml:"router_id"`
	// ListenAddresses and ListenPort are where the speaker accepts
	// sessions (default port 179; -1: accept none, connect only).
	ListenAddresses []string `yaml:"listen_addresses"`
	ListenPort      int32    `yaml:"listen_port"`
	// Interfaces are the interfaces FlowSpec rules apply to (names of
	// interfaces above); empty: all of them.
	Interfaces []string `yaml:"interfaces"`
	// MaxRules is the largest number of rules accepted from BGP (per
	// interface); routes beyond it, the last in RFC 8955 order, are
	// refused. Default 100,000, at most 1,000,000. The compound rules
	// among them (every rule but those of routes of a destination prefix
	// alone, which go to the destination prefix table) must besides fit
	// beside the file rules' in the 256 of the compound-rule table.
	MaxRules int `yaml:"max_rules"`
	// StaleTime is how long the rules of a neighbour whose session went
	// down stay in force (as graceful restart keeps routes), unless it
	// announces them again; then they are removed. Default 0: at once.
	StaleTime time.Duration `yaml:"stale_time"`
	// MaxRulesPerRoute caps how many rules one route may expand into
	// (a route whose components hold several ranges becomes one rule per
	// combination where the rule language has no lists). Default 64.
	MaxRulesPerRoute int `yaml:"max_rules_per_route"`
	// SampleOneIn is the N of the sample modifier (`sample 1/N`,
	// docs/RULES.md) that a route's traffic-action sample bit puts on
	// its rules. Default DefaultSampleOneIn.
	SampleOneIn uint32           `yaml:"sample_one_in"`
	Neighbors   []NeighborConfig `yaml:"neighbors"`
}

// NeighborConfig is one BGP neighbour.
type NeighborConfig struct {
	Address string `yaml:"address"`
	AS      uint32 `yaml:"as"`
	// Password turns on TCP MD5 signatures (RFC 2385) with this key;
	// PasswordFile reads it from a file instead (trailing newline dropped).
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
	// Families are ipv4-flowspec and/or ipv6-flowspec (default both).
	Families []string `yaml:"families"`
	// Port is the neighbour's TCP port to connect to (default 179).
	Port uint16 `yaml:"port"`
	// Passive: never connect, only accept the neighbour's connection.
	Passive bool `yaml:"passive"`
	// LocalAddress is the source address of the session ("" = any).
	LocalAddress string `yaml:"local_address"`
	// HoldTime of the session (default 90s; the keepalive is a third).
	HoldTime time.Duration `yaml:"hold_time"`
	// ConnectRetry is the time between connection attempts (default 5s).
	ConnectRetry time.Duration `yaml:"connect_retry"`
}

// Families of FlowSpec routes a neighbour may send.
const (
	FamilyIPv4FlowSpec = "ipv4-flowspec"
	FamilyIPv6FlowSpec = "ipv6-flowspec"
)

// LoadConfig reads and checks the configuration file at path. Unknown keys
// and values of the wrong type are errors that name the line.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the agent config: %w", err)
	}
	c, err := ParseConfig(b, path)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// ParseConfig is LoadConfig of the YAML in b; name is used in messages.
func ParseConfig(b []byte, name string) (*Config, error) {
	c := &Config{path: name}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: the config is empty: give at least one interface (docs/AGENT.md has an example)", name)
		}
		return nil, fmt.Errorf("%s: %s", name, yamlMessage(err))
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}

// yamlMessage turns yaml.v3's errors ("yaml: unmarshal errors:\n  line 3:
// field foo not found in type agent.Config") into one line that names no
// Go type: "line 3: unknown key foo".
func yamlMessage(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return strings.TrimPrefix(err.Error(), "yaml: ")
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, m := range te.Errors {
		if i := strings.Index(m, ": field "); i >= 0 && strings.Contains(m, " not found in type ") {
			key := m[i+len(": field "):]
			key = key[:strings.Index(key, " not found in type ")]
			m = m[:i] + ": unknown key " + key + " (docs/AGENT.md lists the keys)"
		} else if i := strings.Index(m, " into "); i >= 0 {
			m = m[:i] + " here (docs/AGENT.md says what each key takes)"
		}
		msgs = append(msgs, m)
	}
	return strings.Join(msgs, "; ")
}

// Path is the file the config was read from.
func (c *Config) Path() string { return c.path }

func (c *Config) check() error {
	if len(c.Interfaces) == 0 {
		return errors.New("no interfaces: give at least one under interfaces (docs/AGENT.md has an example)")
	}
	if c.LockTimeout < 0 || c.Debounce < 0 {
		return errors.New("lock_timeout and debounce must not be negative")
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = 10 * time.Second
	}
	if c.Debounce == 0 {
		c.Debounce = 50 * time.Millisecond
	}
	seen := map[string]bool{}
	for i := range c.Interfaces {
		ic := &c.Interfaces[i]
		where := fmt.Sprintf("interfaces[%d]", i)
		if ic.Name == "" {
			return fmt.Errorf("%s: name is missing", where)
		}
		where = fmt.Sprintf("interface %s", ic.Name)
		if seen[ic.Name] {
			return fmt.Errorf("%s is given twice", where)
		}
		seen[ic.Name] = true
		if ic.Mode == "" {
			ic.Mode = "auto"
		}
		if _, err := loader.ParseMode(ic.Mode); err != nil {
			return fmt.Errorf("%s: mode %q: want driver, generic or auto", where, ic.Mode)
		}
		for _, v := range []struct{ key, val string }{{"policy", ic.Policy}, {"malformed", ic.Malformed}} {
			if v.val != "" && v.val != "pass" && v.val != "drop" {
				return fmt.Errorf("%s: %s %q: want pass or drop", where, v.key, v.val)
			}
		}
		if len(ic.RuleFiles) == 0 && strings.TrimSpace(ic.Rules) == "" && ic.Policy == "" && (c.BGP == nil) {
			return fmt.Errorf("%s has no rules: give rule_files, rules, a policy, or bgp", where)
		}
		if ic.Rules != "" {
			if _, err := fastdrop.Parse(strings.NewReader(ic.Rules), where+" rules"); err != nil {
				return err
			}
		}
	}
	if c.BGP != nil {
		if err := c.BGP.check(seen); err != nil {
			return fmt.Errorf("bgp: %w", err)
		}
	}
	return nil
}

func (b *BGPConfig) check(ifaces map[string]bool) error {
	if b.LocalAS == 0 {
		return errors.New("local_as is missing")
	}
	if a, err := netip.ParseAddr(b.RouterID); err != nil || !a.Is4() {
		return fmt.Errorf("router_id %q: want an IPv4 address, like 192.0.2.10", b.RouterID)
	}
	for _, a := range b.ListenAddresses {
		if _, err := netip.ParseAddr(a); err != nil {
			return fmt.Errorf("listen_addresses: %q is not an IP address", a)
		}
	}
	if b.ListenPort == 0 {
		b.ListenPort = 179
	}
	if b.ListenPort < -1 || b.ListenPort > 65535 {
		return fmt.Errorf("listen_port %d: want 1-65535, or -1 to accept no sessions", b.ListenPort)
	}
	for _, n := range b.Interfaces {
		if !ifaces[n] {
			return fmt.Errorf("interfaces: %s is not one of the interfaces above", n)
		}
	}
	if b.MaxRules < 0 || b.MaxRules > MaxBGPRules {
		return fmt.Errorf("max_rules %d: want 1-%d", b.MaxRules, MaxBGPRules)
	}
	if b.MaxRules == 0 {
		b.MaxRules = DefaultMaxBGPRules
	}
	if b.StaleTime < 0 {
		return errors.New("stale_time must not be negative")
	}
	if b.MaxRulesPerRoute == 0 {
		b.MaxRulesPerRoute = 64
	}
	if b.MaxRulesPerRoute < 1 {
		return errors.New("max_rules_per_route must be at least 1")
	}
	if b.SampleOneIn == 0 {
		b.SampleOneIn = DefaultSampleOneIn
	}
	if b.SampleOneIn > fastdrop.MaxSample {
		return fmt.Errorf("sample_one_in %d: want 1-%d", b.SampleOneIn, fastdrop.MaxSample)
	}
	if len(b.Neighbors) == 0 {
		return errors.New("no neighbors: give at least one (address and as)")
	}
	seen := map[netip.Addr]bool{}
	for i := range b.Neighbors {
		n := &b.Neighbors[i]
		a, err := netip.ParseAddr(n.Address)
		if err != nil {
			return fmt.Errorf("neighbors[%d]: address %q is not an IP address", i, n.Address)
		}
		if seen[a] {
			return fmt.Errorf("neighbor %s is given twice", a)
		}
		seen[a] = true
		n.Address = a.String()
		if n.AS == 0 {
			return fmt.Errorf("neighbor %s: as is missing", a)
		}
		if n.Password != "" && n.PasswordFile != "" {
			return fmt.Errorf("neighbor %s: give password or password_file, not both", a)
		}
		if n.LocalAddress != "" {
			if _, err := netip.ParseAddr(n.LocalAddress); err != nil {
				return fmt.Errorf("neighbor %s: local_address %q is not an IP address", a, n.LocalAddress)
			}
		}
		if len(n.Families) == 0 {
			n.Families = []string{FamilyIPv4FlowSpec, FamilyIPv6FlowSpec}
		}
		for _, f := range n.Families {
			if f != FamilyIPv4FlowSpec && f != FamilyIPv6FlowSpec {
				return fmt.Errorf("neighbor %s: family %q: want %s or %s", a, f, FamilyIPv4FlowSpec, FamilyIPv6FlowSpec)
			}
		}
		if n.HoldTime < 0 || (n.HoldTime > 0 && n.HoldTime < 3*time.Second) {
			return fmt.Errorf("neighbor %s: hold_time %s: want 3s or more (or 0 for the default 90s)", a, n.HoldTime)
		}
	}
	return nil
}

// appliesFlowSpec reports whether FlowSpec rules go to iface.
func (c *Config) appliesFlowSpec(iface string) bool {
	if c.BGP == nil {
		return false
	}
	if len(c.BGP.Interfaces) == 0 {
		return true
	}
	for _, n := range c.BGP.Interfaces {
		if n == iface {
			return true
		}
	}
	return false
}

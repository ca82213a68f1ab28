package deploy

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/xdpdrop/xdpdrop/agent"
	"github.com/xdpdrop/xdpdrop/fastdrop"
)

// agentCaps is the least privilege of `xdpdrop agent` (README.md,
// Privileges): the three of an attaching drop, and binding BGP's port 179.
// tests/TestCLIAgentLeastPrivilege runs the agent with the unit's set.
var agentCaps = []string{"CAP_BPF", "CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE", "CAP_PERFMON"}

// unit is a systemd unit file: section -> key -> values (a key given
// twice keeps both, as systemd's list settings do).
type unit map[string]map[string][]string

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			require.Contains(t, []string{"Unit", "Service", "Install"}, section, "%s:%d: unexpected section", path, n)
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok && section != "", "%s:%d: not key=value in a section: %q", path, n, line)
			require.False(t, strings.HasSuffix(line, `\`), "%s:%d: continuation lines are not checked", path, n)
			u[section][k] = append(u[section][k], v)
		}
	}
	require.NoError(t, sc.Err())
	return u
}

// one returns the single value of key in section.
func (u unit) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u[section][key]
	require.Len(t, v, 1, "[%s] %s= given once", section, key)
	return v[0]
}

func capSet(t *testing.T, vals []string) []string {
	t.Helper()
	var out []string
	for _, v := range vals {
		out = append(out, strings.Fields(v)...)
	}
	slices.Sort(out)
	return out
}

// TestSystemdUnit checks what docs/AGENT.md says of the unit: a service
// user holding exactly the agent's capabilities and no way to more,
// ProtectSystem=strict with bpffs writable, restarted on failure, started
// as xdpdrop agent with its config, which is checked first.
func TestSystemdUnit(t *testing.T) {
	u := readUnit(t, "xdpdrop-agent.service")
	require.Contains(t, []string{"simple", "notify", "exec"}, u.one(t, "Service", "Type"))
	user := u.one(t, "Service", "User")
	require.NotContains(t, []string{"", "root", "0"}, user, "runs as a service user")

	require.Equal(t, agentCaps, capSet(t, u["Service"]["AmbientCapabilities"]), "AmbientCapabilities: exactly the agent's")
	require.Equal(t, agentCaps, capSet(t, u["Service"]["CapabilityBoundingSet"]), "CapabilityBoundingSet: nothing beyond them")
	require.Equal(t, "yes", u.one(t, "Service", "NoNewPrivileges"))

	require.Equal(t, "strict", u.one(t, "Service", "ProtectSystem"))
	require.Contains(t, capSet(t, u["Service"]["ReadWritePaths"]), "/sys/fs/bpf", "the pins are written under /sys/fs/bpf")
	require.Contains(t, []string{"on-failure", "always", "on-abnormal"}, u.one(t, "Service", "Restart"))
	require.NotEmpty(t, u.one(t, "Service", "RestartSec"))

	start := strings.Fields(u.one(t, "Service", "ExecStart"))
	require.GreaterOrEqual(t, len(start), 4)
	require.Equal(t, "xdpdrop", filepath.Base(start[0]))
	require.Equal(t, []string{"agent", "--config"}, start[1:3])
	cfg := start[3]
	require.Contains(t, u.one(t, "Service", "ExecStartPre"), "agent --check "+cfg, "the config is checked before the agent starts")
	require.Equal(t, "/bin/kill -HUP $MAINPID", u.one(t, "Service", "ExecReload"), "systemctl reload rereads the rule files")
	require.Contains(t, u.one(t, "Service", "RuntimeDirectory"), "xdpdrop", "/run/xdpdrop for the status file")
	require.Equal(t, "multi-user.target", u.one(t, "Install", "WantedBy"))
}

// readManifests decodes the multi-document YAML at path strictly (an
// unknown or duplicated field is an error) into Kubernetes API types.
func readManifests(t *testing.T, path string) (*corev1.ConfigMap, *appsv1.DaemonSet) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var cm *corev1.ConfigMap
	var ds *appsv1.DaemonSet
	for i, doc := range bytes.Split(b, []byte("\n---\n")) {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		require.NoError(t, yaml.Unmarshal(doc, &meta), "document %d", i)
		switch meta.Kind {
		case "ConfigMap":
			require.Equal(t, "v1", meta.APIVersion)
			cm = &corev1.ConfigMap{}
			require.NoError(t, yaml.UnmarshalStrict(doc, cm), "document %d", i)
		case "DaemonSet":
			require.Equal(t, "apps/v1", meta.APIVersion)
			ds = &appsv1.DaemonSet{}
			require.NoError(t, yaml.UnmarshalStrict(doc, ds), "document %d", i)
		default:
			t.Fatalf("document %d: unexpected kind %q", i, meta.Kind)
		}
	}
	require.NotNil(t, cm, "a ConfigMap")
	require.NotNil(t, ds, "a DaemonSet")
	return cm, ds
}

// TestStrictDecodeRefusesUnknownFields: the decoder the test relies on
// does refuse what Kubernetes would drop silently.
func TestStrictDecodeRefusesUnknownFields(t *testing.T) {
	var ds appsv1.DaemonSet
	err := yaml.UnmarshalStrict([]byte("apiVersion: apps/v1\nkind: DaemonSet\nspec:\n  template:\n    spec:\n      hostNetwrok: true\n"), &ds)
	require.ErrorContains(t, err, `unknown field "hostNetwrok"`)
	err = yaml.UnmarshalStrict([]byte("kind: ConfigMap\ndata:\n  a: b\ndata:\n  c: d\n"), &corev1.ConfigMap{})
	require.ErrorContains(t, err, "already set", "a key given twice")
}

// TestKubernetesDaemonSet checks what docs/AGENT.md says of the DaemonSet:
// the node's network, the node's bpffs, the unit's capabilities and no
// privileged container, a readiness probe on the agent's /healthz where
// the config has the agent listen, resource limits, and a ConfigMap whose
// config and rules the agent accepts, at the paths the pod mounts.
func TestKubernetesDaemonSet(t *testing.T) {
	cm, ds := readManifests(t, filepath.Join("kubernetes", "xdpdrop-agent.yaml"))
	pod := ds.Spec.Template.Spec
	require.True(t, pod.HostNetwork, "hostNetwork: XDP attaches to the node's interfaces")
	require.Equal(t, ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels, "the selector selects the pods")
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]

	// Capabilities: the unit's, by name; nothing else.
	sc := c.SecurityContext
	require.NotNil(t, sc)
	require.False(t, sc.Privileged != nil && *sc.Privileged, "not privileged")
	require.NotNil(t, sc.AllowPrivilegeEscalation)
	require.False(t, *sc.AllowPrivilegeEscalation)
	require.NotNil(t, sc.Capabilities)
	require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	var added []string
	for _, c := range sc.Capabilities.Add {
		added = append(added, "CAP_"+string(c))
	}
	slices.Sort(added)
	require.Equal(t, agentCaps, added, "the capabilities of the systemd unit")
	u := readUnit(t, "xdpdrop-agent.service")
	require.Equal(t, capSet(t, u["Service"]["AmbientCapabilities"]), added, "the same as the unit's AmbientCapabilities")

	// The node's bpffs, so that the pins outlive the pod.
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	bpf, ok := mounts["/sys/fs/bpf"]
	require.True(t, ok, "/sys/fs/bpf is mounted")
	require.False(t, bpf.ReadOnly)
	hp := vols[bpf.Name].HostPath
	require.NotNil(t, hp, "/sys/fs/bpf is the node's")
	require.Equal(t, "/sys/fs/bpf", hp.Path)
	require.NotNil(t, hp.Type)
	require.Equal(t, corev1.HostPathDirectory, *hp.Type, "fail rather than create a directory that is not bpffs")

	// The config: the agent's own parser accepts it, and its rule files
	// are keys of the ConfigMap at the path it is mounted.
	cfgMount, ok := mounts["/etc/xdpdrop"]
	require.True(t, ok)
	require.NotNil(t, vols[cfgMount.Name].ConfigMap)
	require.Equal(t, cm.Name, vols[cfgMount.Name].ConfigMap.Name)
	args := append(append([]string{}, c.Command...), c.Args...)
	i := slices.Index(args, "--config")
	require.Positive(t, i, "runs the agent with --config: %q", args)
	require.Equal(t, "agent", args[i-1])
	cfgPath := args[i+1]
	require.Equal(t, "/etc/xdpdrop", filepath.Dir(cfgPath))
	text, ok := cm.Data[filepath.Base(cfgPath)]
	require.True(t, ok, "the ConfigMap holds %s", cfgPath)
	cfg, err := agent.ParseConfig([]byte(text), "ConfigMap "+cm.Name)
	require.NoError(t, err)
	for _, ic := range cfg.Interfaces {
		for _, f := range ic.RuleFiles {
			require.Equal(t, "/etc/xdpdrop", filepath.Dir(f), "rule file %s is in the ConfigMap", f)
			rules, ok := cm.Data[filepath.Base(f)]
			require.True(t, ok, "the ConfigMap holds %s", f)
			_, err := fastdrop.Parse(strings.NewReader(rules), f)
			require.NoError(t, err)
		}
	}
	require.Equal(t, agent.DefaultStatusFile, cfg.Status.File, "where xdpdrop status looks for it")
	run, ok := mounts[filepath.Dir(cfg.Status.File)]
	require.True(t, ok, "the status file %s is on a mount", cfg.Status.File)
	require.False(t, run.ReadOnly)
	require.NotNil(t, vols[run.Name].HostPath, "the node's: xdpdrop status on the node reads it")
	require.Equal(t, filepath.Dir(agent.DefaultStatusFile), vols[run.Name].HostPath.Path)

	// Readiness: /healthz on the agent's status listener.
	host, port, err := net.SplitHostPort(cfg.Status.Listen)
	require.NoError(t, err, "the config has the agent serve its status")
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		require.NotNil(t, p, name)
		require.NotNil(t, p.HTTPGet, name)
		require.Equal(t, "/healthz", p.HTTPGet.Path, name)
		require.Equal(t, port, strconv.Itoa(p.HTTPGet.Port.IntValue()), name)
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			require.Equal(t, host, p.HTTPGet.Host, "%s: the agent listens on loopback only: the probe must ask there (hostNetwork)", name)
		}
	}

	// Resources: requests and limits of both.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, ok := c.Resources.Requests[r]
		require.True(t, ok, "request of %s", r)
		lim, ok := c.Resources.Limits[r]
		require.True(t, ok, "limit of %s", r)
		require.Equal(t, 1, lim.Cmp(req), "%s: limit above the request", r)
	}
	require.Equal(t, "ALL", string(sc.Capabilities.Drop[0]))
}

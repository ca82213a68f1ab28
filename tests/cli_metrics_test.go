package tests

import (
	"bufio"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startCLI starts a long-running CLI command and returns it with the
// metrics URL it prints once its listener is bound.
func startCLI(t *testing.T, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(xdpdropBin, args...)
	return cmd, startCmd(t, cmd)
}

// startCmd is startCLI for a prepared command (another user, say).
func startCmd(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	re := regexp.MustCompile(`serving metrics on (http://\S+/metrics)`)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case url := <-found:
		return url
	case <-time.After(30 * time.Second):
		t.Fatal("the command never said where it serves metrics")
		return ""
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestCLIExporter serves a fast drop's counters as Prometheus metrics and
// stops cleanly on SIGINT.
func TestCLIExporter(t *testing.T) {
	v := sandboxForCLI(t)
	rules := writeRules(t, "drop udp dport 11211\ndrop src 203.0.113.0/24\n")
	r := cli(t, "drop", "--iface", v.Name, "--rules", rules)
	require.Equal(t, 0, r.code, r.stderr)
	send(t, v, "1000", "11211")

	cmd, url := startCLI(t, "exporter", "--metrics", "127.0.0.1:0", "--iface", v.Name)
	body := scrape(t, url)
	require.Contains(t, body, `xdpdrop_rule_packets_total{action="drop",interface="`+v.Name+`",rule="drop udp dport 11211"} 1000`)
	require.Contains(t, body, `xdpdrop_rules{interface="`+v.Name+`",kind="prefix"} 1`)
	require.Regexp(t, `xdpdrop_packets_total\{interface="`+v.Name+`",verdict="drop"\} 1000`, body)
	require.NotContains(t, body, `rule="drop src 203.0.113.0/24"`, "rules that matched nothing make no series")

	// A scrape reads the counters now, not a cached copy.
	send(t, v, "500", "11211")
	require.Contains(t, scrape(t, url), `rule="drop udp dport 11211"} 1500`)

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, cmd.Wait(), "exporter exits 0 on Ctrl-C")
}

func TestCLIMetricsBadAddress(t *testing.T) {
	r := cli(t, "exporter", "--metrics", "127.0.0.1:99999")
	requireOneLineError(t, r, 1, "--metrics 127.0.0.1:99999")
	require.True(t, strings.Contains(r.stderr, "choose a free address"), r.stderr)
	r = cli(t, "stats", "--metrics", "127.0.0.1:0")
	requireOneLineError(t, r, 2, "--metrics needs --watch")
}

package loader_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// childEnv selects, in a re-executed test binary, which child function of
// children runs instead of the tests.
const childEnv = "XDPDROP_LOADER_CHILD"

// TestMain runs a child function when the binary was re-executed by a test
// (a real second process, for pins, privileges and mount namespaces).
func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		if (name == "unprivileged" || name == "no-caps-pinned") && os.Getenv(capsDroppedEnv) == "" {
			// Does not return unless it fails.
			fmt.Fprintln(os.Stderr, dropCapsAndReexec())
			os.Exit(1)
		}
		fn, ok := children[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown child %q\n", name)
			os.Exit(2)
		}
		if err := fn(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childResult is what a child prints on stdout as JSON.
type childResult struct {
	Err      string            `json:"err,omitempty"`
	Is       map[string]bool   `json:"is,omitempty"`
	ProgName string            `json:"prog_name,omitempty"`
	ProgID   uint32            `json:"prog_id,omitempty"`
	Mode     string            `json:"mode,omitempty"`
	Config   map[string]string `json:"config,omitempty"`
	Maps     []string          `json:"maps,omitempty"`
}

// sentinels are the errors a child reports errors.Is for.
var sentinels = map[string]error{
	"ErrNoInterface":     loader.ErrNoInterface,
	"ErrNotPermitted":    loader.ErrNotPermitted,
	"ErrModeUnsupported": loader.ErrModeUnsupported,
	"ErrNoBPFFS":         loader.ErrNoBPFFS,
	"ErrForeign":         loader.ErrForeign,
	"ErrNotPinned":       loader.ErrNotPinned,
	"ErrStale":           loader.ErrStale,
	"ErrAlreadyAttached": loader.ErrAlreadyAttached,
}

// runChild re-executes the test binary as child name with env and extra
// files, and decodes what it printed.
func runChild(t *testing.T, name string, env []string, setup func(*exec.Cmd)) childResult {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + name}, env...)...)
	if setup != nil {
		setup(cmd)
	}
	out, err := cmd.Output()
	var stderr string
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, "child %s: %s", name, stderr)
	var res childResult
	require.NoError(t, json.Unmarshal(out, &res), "child %s printed %q", name, out)
	return res
}

// report prints r as the child's result.
func report(r childResult) error {
	return json.NewEncoder(os.Stdout).Encode(r)
}

func errResult(err error) childResult {
	r := childResult{Is: map[string]bool{}}
	if err != nil {
		r.Err = err.Error()
		for n, s := range sentinels {
			r.Is[n] = errorsIs(err, s)
		}
	}
	return r
}

// loadBasic loads the basic programs with xdp_count returning verdict.
func loadBasic(t *testing.T, verdict gen.BasicVerdict) *gen.BasicObjects {
	t.Helper()
	testenv.RequireRoot(t)
	objs, err := loadBasicObjs(verdict)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, objs.Close()) })
	return objs
}

func loadBasicObjs(verdict gen.BasicVerdict) (*gen.BasicObjects, error) {
	spec, err := gen.LoadBasic()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables[gen.BasicVarCountVerdict].Set(uint32(verdict)); err != nil {
		return nil, err
	}
	var objs gen.BasicObjects
	if err := loader.Load(spec, &objs, nil); err != nil {
		return nil, err
	}
	return &objs, nil
}

// counted sums one slot of the per-CPU verdict counters.
func counted(t *testing.T, m *ebpf.Map, v gen.BasicVerdict) uint64 {
	t.Helper()
	var per []gen.BasicCounter
	require.NoError(t, m.Lookup(uint32(v), &per))
	var n uint64
	for _, c := range per {
		n += c.Packets
	}
	return n
}

// statusOf returns the status of one interface.
func statusOf(t *testing.T, iface, root string) loader.IfaceStatus {
	t.Helper()
	sts, err := loader.Status(iface, root)
	require.NoError(t, err)
	require.Len(t, sts, 1, "status of %s", iface)
	return sts[0]
}

// requireClean asserts that iface runs no XDP program and has no pins
// under root: what every failed call must leave behind.
func requireClean(t *testing.T, iface, root string) {
	t.Helper()
	st := statusOf(t, iface, root)
	require.Empty(t, st.Programs, "programs left on %s", iface)
	require.Empty(t, st.PinDir, "pins left for %s", iface)
	if root != "" {
		ents, err := os.ReadDir(root)
		if err == nil {
			for _, e := range ents {
				require.NotEqual(t, iface, e.Name(), "pin directory left for %s", iface)
			}
		}
	}
}

// udpFlow sends UDP datagrams from the peer namespace to the host end
// until stopped, counting what it sent.
type udpFlow struct {
	conn *net.UDPConn
	sent atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

const flowPort = 9999

var flowPayload = []byte("xdpdrop-loader-flow")

// startFlow opens a socket in v's peer namespace and sends to
// 198.18.0.1:flowPort from a goroutine.
func startFlow(t *testing.T, v *testenv.Veth) *udpFlow {
	t.Helper()
	f := &udpFlow{stop: make(chan struct{}), done: make(chan struct{})}
	require.NoError(t, v.InPeerNS(func() error {
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(198, 18, 0, 1), Port: flowPort})
		f.conn = c
		return err
	}))
	go func() {
		defer close(f.done)
		// Each datagram carries its sequence number (the number sent
		// before it), then flowPayload.
		buf := make([]byte, 8+len(flowPayload))
		copy(buf[8:], flowPayload)
		for {
			select {
			case <-f.stop:
				return
			default:
			}
			binary.BigEndian.PutUint64(buf, f.sent.Load())
			if _, err := f.conn.Write(buf); err == nil {
				f.sent.Add(1)
			}
		}
	}()
	t.Cleanup(f.close)
	return f
}

func (f *udpFlow) close() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	<-f.done
	f.conn.Close()
}

// waitSent waits until the flow has sent n more datagrams (bounded, so a
// stuck sender fails the test instead of hanging it).
func (f *udpFlow) waitSent(t *testing.T, n uint64) {
	t.Helper()
	target := f.sent.Load() + n
	deadline := time.Now().Add(10 * time.Second)
	for f.sent.Load() < target {
		if time.Now().After(deadline) {
			t.Fatalf("sender stuck at %d datagrams, waiting for %d", f.sent.Load(), target)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// deadPID returns a process id that no process has.
func deadPID(t *testing.T) string {
	t.Helper()
	for pid := 4_000_000; pid > 1000; pid -= 7919 {
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			return itoa(pid)
		}
	}
	t.Fatal("no free pid")
	return ""
}

func itoa(i int) string { return strconv.Itoa(i) }

// capsDroppedEnv marks the second exec of an unprivileged child.
const capsDroppedEnv = "XDPDROP_LOADER_CAPS_DROPPED"

// dropCapsAndReexec clears this thread's capability bounding (all but
// CAP_BPF and CAP_PERFMON if $KEEP_BPF_CAPS), inheritable
// and ambient sets and executes the binary again from it: the new process
// runs as uid 0 with no capabilities at all (root gets only what the
// bounding set allows on exec), a precise "not permitted" that still owns
// root's files.
func dropCapsAndReexec() error {
	runtime.LockOSThread() // capabilities are per thread; exec from this one
	last, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(last)))
	if err != nil {
		return err
	}
	keep := map[int]bool{}
	if os.Getenv("KEEP_BPF_CAPS") == "1" {
		keep[unix.CAP_BPF], keep[unix.CAP_PERFMON] = true, true
	}
	for c := 0; c <= n; c++ {
		if keep[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear inheritable capabilities: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return unix.Exec(exe, os.Args, append(os.Environ(), capsDroppedEnv+"=1"))
}

package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/bpffs"
	"github.com/xdpdrop/xdpdrop/sandbox"
)

// BPFFSPath is where bpffs is expected and mounted.
const BPFFSPath = "/sys/fs/bpf"

// InCI reports whether the tests run under CI (CI=true or CI=1).
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1"
}

// SkipOrFail skips the test outside CI and fails it under CI. The message
// must name what is missing (a privilege, a kernel feature, a tool).
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("CI=true, so this cannot be skipped: %s", msg)
	}
	t.Skip(msg)
}

// RequireRoot skips (or, under CI, fails) unless the process has the
// capabilities that loading BPF programs and creating interfaces need.
func RequireRoot(t testing.TB) {
	t.Helper()
	if missing := missingCaps(); len(missing) > 0 {
		SkipOrFail(t, "needs root (missing %s)", strings.Join(missing, ", "))
	}
}

// RequireBPFFS makes sure bpffs is mounted at BPFFSPath, mounting it if it
// is absent, and returns the path.
func RequireBPFFS(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	if err := bpffs.Mount(BPFFSPath); err != nil {
		SkipOrFail(t, "bpffs is not mounted at %s and mounting it failed: %v", BPFFSPath, err)
	}
	return BPFFSPath
}

// TempPinDir returns a fresh directory in bpffs, removed with everything
// pinned in it when the test ends.
func TempPinDir(t testing.TB) string {
	t.Helper()
	root := RequireBPFFS(t)
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "xdpdrop-test-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatalf("create pin directory: %v", err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove pin directory %s: %v", dir, err)
		}
	})
	return dir
}

// VethOptions shape the pair NewVeth makes.
type VethOptions struct {
	Queues  int  // rx/tx queues on each end, default 1
	GRO     bool // GRO on the host (root-namespace) end
	PeerGRO bool // GRO on the peer end
	MTU     int  // default 1500
}

// Veth is a veth pair: end Name in the test's namespace, end PeerName in a
// fresh namespace NS (named NSName).
type Veth struct {
	Name      string
	Index     int
	MAC       net.HardwareAddr
	PeerName  string
	PeerIndex int
	PeerMAC   net.HardwareAddr
	NSName    string
	NS        netns.NsHandle

	pair *sandbox.Pair
}

// NewVeth creates a veth pair with unique names, its peer end in a fresh
// network namespace, both up with addresses (sandbox.HostAddr4/6 on Name,
// sandbox.PeerAddr4/6 on PeerName). Everything is removed when the test
// ends, whether it passed, failed or panicked.
func NewVeth(t testing.TB, opts VethOptions) *Veth {
	t.Helper()
	RequireRoot(t)
	p, err := sandbox.New(sandbox.Options{Queues: opts.Queues, GRO: opts.GRO, PeerGRO: opts.PeerGRO, MTU: opts.MTU})
	if err != nil {
		t.Fatalf("create veth pair: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("remove veth pair %s: %v", p.Name, err)
		}
	})
	return &Veth{
		Name: p.Name, Index: p.Index, MAC: p.MAC,
		PeerName: p.Peer, PeerIndex: p.PeerIdx, PeerMAC: p.PeerMAC,
		NSName: p.NSName, NS: p.NS, pair: p,
	}
}

// InPeerNS runs fn on a locked OS thread inside the peer's namespace.
func (v *Veth) InPeerNS(fn func() error) error {
	return v.pair.InPeerNS(fn)
}

// InNetNS runs fn on a locked OS thread inside namespace ns.
func InNetNS(ns netns.NsHandle, fn func() error) error {
	return sandbox.InNS(ns, fn)
}

// missingCaps lists the capabilities the kernel tests need that this
// process lacks.
func missingCaps() []string {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return []string{"capabilities (capget failed: " + err.Error() + ")"}
	}
	need := []struct {
		name string
		bit  uint
	}{
		{"CAP_NET_ADMIN", unix.CAP_NET_ADMIN},
		{"CAP_SYS_ADMIN", unix.CAP_SYS_ADMIN},
		{"CAP_BPF", unix.CAP_BPF},
		{"CAP_PERFMON", unix.CAP_PERFMON},
	}
	var missing []string
	for _, c := range need {
		if data[c.bit/32].Effective&(1<<(c.bit%32)) == 0 {
			missing = append(missing, c.name)
		}
	}
	return missing
}

// TcpdumpHex joins the hex columns of `tcpdump -xx` output into one
// string of hex digits, a | between packets, so that a test can look for
// the hex.EncodeToString of the bytes it expects.
func TcpdumpHex(out string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "0x") {
			b.WriteString("|")
			continue
		}
		_, rest, _ := strings.Cut(l, ":")
		b.WriteString(strings.ReplaceAll(strings.TrimSpace(rest), " ", ""))
	}
	return b.String()
}

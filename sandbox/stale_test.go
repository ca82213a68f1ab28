package sandbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/sandbox"
)

// deadPID returns the pid of a process that has ended.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// leftover makes what a killed process leaves: a namespace named as New
// names it for pid, and the veth pair base+"a"/base+"b" into it, without
// New's lock.
func leftover(t *testing.T, base string, pid int) string {
	t.Helper()
	name := sandbox.NSName(base, pid)
	ns, err := sandbox.NewNamedNS(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	t.Cleanup(func() { // in case the test fails before removing them
		if l, err := netlink.LinkByName(base + "a"); err == nil {
			_ = netlink.LinkDel(l)
		}
		_ = netns.DeleteNamed(name)
	})
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: base + "a"}, PeerName: base + "b", PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(v); err != nil {
		t.Fatal(err)
	}
	return name
}

func exists(name string) bool {
	_, err := os.Stat(filepath.Join(sandbox.NetnsDir, name))
	return err == nil
}

func linkExists(name string) bool {
	_, err := netlink.LinkByName(name)
	return err == nil
}

// TestRemoveStale: what a killed process left is removed; a running
// process's pair, a leftover someone still holds the lock of, and names of
// another prefix are not.
func TestRemoveStale(t *testing.T) {
	testenv.RequireRoot(t)
	dead := deadPID(t)

	stale := leftover(t, "xdt1a2b3c4d", dead)
	held := leftover(t, "xdt5e6f7a8b", dead)
	alivePID := leftover(t, "xdt9c0d1e2f", os.Getpid()) // pid of a running process, no lock
	other := leftover(t, "xdu1a2b3c4d", dead)           // another prefix
	live, err := sandbox.New(sandbox.Options{Prefix: "xdt"})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	// New's lock is visible through the namespace's name.
	if f, err := os.Open(filepath.Join(sandbox.NetnsDir, live.NSName)); err != nil {
		t.Fatal(err)
	} else {
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			t.Error("a live sandbox's namespace is not locked")
		}
		f.Close()
	}
	// Someone (in another pid namespace, say) still holds this one.
	hf, err := os.Open(filepath.Join(sandbox.NetnsDir, held))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(hf.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	removed, err := sandbox.RemoveStale("xdt")
	if err != nil {
		t.Fatalf("RemoveStale: %v", err)
	}
	if !slices.Equal(removed, []string{stale}) {
		t.Errorf("removed %v, want [%s]", removed, stale)
	}
	if exists(stale) || linkExists("xdt1a2b3c4da") {
		t.Errorf("stale namespace %s or its veth is still there", stale)
	}
	for _, n := range []string{held, alivePID, other, live.NSName} {
		if !exists(n) {
			t.Errorf("namespace %s was removed", n)
		}
	}
	for _, l := range []string{"xdt5e6f7a8ba", "xdt9c0d1e2fa", "xdu1a2b3c4da", live.Name} {
		if !linkExists(l) {
			t.Errorf("veth %s was removed", l)
		}
	}

	// Once the lock is let go, the held one is stale too.
	hf.Close()
	if removed, err = sandbox.RemoveStale("xdt"); err != nil || !slices.Equal(removed, []string{held}) {
		t.Errorf("RemoveStale after the lock was released: %v, %v; want [%s]", removed, err, held)
	}
	if linkExists("xdt5e6f7a8ba") || !exists(live.NSName) {
		t.Error("the released leftover's veth is still there, or the live sandbox is gone")
	}
}

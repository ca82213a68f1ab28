package bpffs_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/bpffs"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

func TestIsBPFFSNotBPF(t *testing.T) {
	for _, p := range []string{"/proc", t.TempDir(), filepath.Join(t.TempDir(), "missing")} {
		ok, err := bpffs.IsBPFFS(p)
		if err != nil || ok {
			t.Errorf("bpffs.IsBPFFS(%s) = %v, %v; want false, nil", p, ok, err)
		}
	}
}

// TestMountTemp mounts a private bpffs on a temporary directory (never on
// /sys/fs/bpf, which other tests share), checks that a second Mount is a
// no-op rather than a stacked mount, and that MkdirOwner makes owner-only
// directories in it and refuses paths outside bpffs.
func TestMountTemp(t *testing.T) {
	testenv.RequireRoot(t)
	mp := filepath.Join(t.TempDir(), "bpf")
	if err := bpffs.Mount(mp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mp, err)
		}
	})
	ok, err := bpffs.IsBPFFS(mp)
	if err != nil || !ok {
		t.Fatalf("IsBPFFS after Mount = %v, %v", ok, err)
	}
	fi, err := os.Stat(mp)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("bpffs root mode %v, want 0700", fi.Mode().Perm())
	}

	// Put a marker in; a second Mount stacking a fresh bpffs would hide it.
	marker := filepath.Join(mp, "marker")
	if err := os.Mkdir(marker, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := bpffs.Mount(mp); err != nil {
		t.Fatalf("second Mount: %v", err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("second Mount hid the first mount's contents: %v", err)
	}

	dir := filepath.Join(mp, "xdpdrop", "veth0")
	if err := bpffs.MkdirOwner(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := bpffs.MkdirOwner(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s mode %v, want 0700", d, fi.Mode().Perm())
		}
	}

	err = bpffs.MkdirOwner(filepath.Join(t.TempDir(), "notbpf"))
	if !errors.Is(err, bpffs.ErrNoBPFFS) {
		t.Errorf("MkdirOwner outside bpffs: %v, want bpffs.ErrNoBPFFS", err)
	}
}

func TestMountNotPossible(t *testing.T) {
	// A mount point under /proc cannot be created: the error says so and
	// how to mount by hand.
	err := bpffs.Mount("/proc/xdpdrop-no-such-dir")
	if !errors.Is(err, bpffs.ErrNoBPFFS) {
		t.Fatalf("Mount under /proc: %v, want bpffs.ErrNoBPFFS", err)
	}
	t.Log(err)
}

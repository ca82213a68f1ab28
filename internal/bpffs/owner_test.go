package bpffs_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/xdpdrop/xdpdrop/internal/bpffs"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// TestCheckPath: every directory on a pin path is checked for what could
// let another user change what is pinned below it.
func TestCheckPath(t *testing.T) {
	base := testenv.TempPinDir(t) // root's, 0700, on bpffs
	mk := func(name string, mode os.FileMode, uid int) string {
		t.Helper()
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sticky := mk("sticky", os.ModeSticky|0o777, 0)
	open := mk("open", 0o777, 0)
	group := mk("group", 0o770, 0)
	other := mk("other", 0o700, 65534)
	if err := os.Symlink(sticky, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir     string
		exists  bool
		wantErr string // "" for none
	}{
		{base, true, ""},
		{filepath.Join(base, "missing", "deeper"), false, ""},
		{filepath.Join(sticky, "pins"), false, ""}, // as /sys/fs/bpf/xdpdrop
		{sticky, true, "is writable by other users (mode 1777)"},
		{filepath.Join(open, "pins"), false, open + " is writable by other users (mode 0777)"},
		{filepath.Join(group, "pins"), false, group + " is writable by other users (mode 0770)"},
		{other, true, other + " belongs to nobody (uid 65534), not to this user, root: another user made it"},
		{filepath.Join(other, "pins"), false, other + " belongs to nobody (uid 65534)"},
		{filepath.Join(base, "link", "pins"), false, filepath.Join(base, "link") + " is a symbolic link"},
	} {
		exists, err := bpffs.CheckPath(tc.dir)
		if tc.wantErr == "" {
			if err != nil || exists != tc.exists {
				t.Errorf("CheckPath(%s) = %v, %v; want %v, nil", tc.dir, exists, err, tc.exists)
			}
			continue
		}
		if !errors.Is(err, bpffs.ErrUnsafe) || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("CheckPath(%s) = %v; want ErrUnsafe with %q", tc.dir, err, tc.wantErr)
		}
		if tc.dir == sticky {
			continue // fine as an ancestor, as above
		}
		// MkdirOwner refuses the same, and makes nothing.
		if err := bpffs.MkdirOwner(filepath.Join(tc.dir, "x")); !errors.Is(err, bpffs.ErrUnsafe) {
			t.Errorf("MkdirOwner under %s: %v, want ErrUnsafe", tc.dir, err)
		}
		if _, err := os.Lstat(filepath.Join(tc.dir, "x")); err == nil {
			t.Errorf("MkdirOwner made %s/x", tc.dir)
		}
	}
}

// TestMkdirOwnerUmask: the directories are 0700 and the caller's whatever
// the umask, which could otherwise leave them unusable (0500) or, with
// an existing wider directory, readable by others.
func TestMkdirOwnerUmask(t *testing.T) {
	base := testenv.TempPinDir(t)
	old := syscall.Umask(0o277)
	defer syscall.Umask(old)
	dir := filepath.Join(base, "a", "b")
	if err := bpffs.MkdirOwner(dir); err != nil {
		t.Fatal(err)
	}
	syscall.Umask(old)
	for _, d := range []string{filepath.Dir(dir), dir} {
		fi, err := os.Lstat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 || !fi.IsDir() {
			t.Errorf("%s: mode %v, want a 0700 directory", d, fi.Mode())
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Geteuid() {
			t.Errorf("%s: owner %d", d, uid)
		}
	}
	// Something to pin in: the directory works.
	if err := os.Mkdir(filepath.Join(dir, "c"), 0o700); err != nil {
		t.Errorf("use the directory: %v", err)
	}
}

// TestMkdirOwnerNotBPFFS: outside bpffs nothing is made.
func TestMkdirOwnerNotBPFFS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := bpffs.MkdirOwner(dir); !errors.Is(err, bpffs.ErrNoBPFFS) {
		t.Fatalf("MkdirOwner outside bpffs: %v, want ErrNoBPFFS", err)
	}
	if _, err := os.Lstat(filepath.Dir(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("MkdirOwner made %s: %v", filepath.Dir(dir), err)
	}
}

// TestInInitialMountNS: the test runs in the host's mount namespace (CI
// and the project's machines do), and this kernel can tell.
func TestInInitialMountNS(t *testing.T) {
	initial, known := bpffs.InInitialMountNS()
	if !known {
		testenv.SkipOrFail(t, "cannot tell the mount namespace: a kernel before 6.18 and /proc/1/ns/mnt unreadable")
	}
	if !initial {
		testenv.SkipOrFail(t, "the tests run in a mount namespace other than the host's")
	}
}

package bpffs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// CheckPath checks every existing directory on the path of dir, from /
// down, before anything is read from or pinned below it:
//
//   - none may be a symbolic link (the path must be the real one);
//   - each must belong to root or to the caller (its effective uid);
//   - none may be writable by group or others, except an ancestor with the
//     sticky bit (as /sys/fs/bpf, mode 1777), where others cannot rename
//     or remove what is not theirs;
//   - dir itself must belong to the caller.
//
// A directory that fails wraps ErrUnsafe with its name, owner, mode and
// what to do; one that cannot be entered says whose it is. CheckPath
// reports whether dir exists; a missing directory is not an error.
func CheckPath(dir string) (exists bool, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, fmt.Errorf("pin directory %s: %w", dir, err)
	}
	_, missing, err := walk(abs)
	return missing == "", err
}

// walk checks the existing directories of the absolute path abs as
// CheckPath does. It returns the deepest one that exists and the first
// that does not ("" if abs exists).
func walk(abs string) (deepest, missing string, err error) {
	euid := os.Geteuid()
	p := "/"
	if err := checkDir(p, abs == "/", euid); err != nil {
		return "", "", err
	}
	rest := abs[1:]
	for rest != "" {
		var name string
		name, rest, _ = cutSlash(rest)
		if name == "" {
			continue
		}
		next := filepath.Join(p, name)
		if err := checkDir(next, rest == "", euid); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return p, next, nil
			}
			if errors.Is(err, fs.ErrPermission) {
				return "", "", notEnterable(p, euid, err)
			}
			return "", "", err
		}
		p = next
	}
	return p, "", nil
}

func cutSlash(s string) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// checkDir checks one directory of a pin path; last is set for the pin
// directory itself. Lstat never follows a symbolic link.
func checkDir(p string, last bool, euid int) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("pin directory %s: no owner information", p)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symbolic link: give the pin root by its real path (--pin-root)", ErrUnsafe, p)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafe, p)
	}
	uid := int(st.Uid)
	if uid != euid && uid != 0 {
		orRoot := " or to root"
		if euid == 0 {
			orRoot = ""
		}
		return fmt.Errorf("%w: %s belongs to %s, not to this user, %s%s: another user made it, so nothing below it can be trusted; "+
			"check and remove it (rm -r %s), or use a pin root of your own (--pin-root)", ErrUnsafe, p, who(uid), who(euid), orRoot, p)
	}
	if last && uid != euid {
		return fmt.Errorf("%w: %s belongs to %s, not to this user, %s: run as %s, or use a pin root of this user's own (--pin-root)",
			ErrUnsafe, p, who(uid), who(euid), who(uid))
	}
	perm := fi.Mode().Perm()
	sticky := fi.Mode()&fs.ModeSticky != 0
	if perm&0o022 != 0 && (last || !sticky) {
		return fmt.Errorf("%w: %s is writable by other users (mode %04o): they could replace what is pinned below it; "+
			"make it writable by its owner only (chmod go-w %s), or use another pin root (--pin-root)", ErrUnsafe, p, uint32(perm)|stickyBit(sticky), p)
	}
	return nil
}

func stickyBit(sticky bool) uint32 {
	if sticky {
		return 0o1000
	}
	return 0
}

// notEnterable explains EACCES below dir: whose dir is, and what to do.
func notEnterable(dir string, euid int, err error) error {
	var st unix.Stat_t
	if unix.Lstat(dir, &st) == nil && int(st.Uid) != euid {
		return fmt.Errorf("%w: %s belongs to %s (mode %04o), and this process runs as %s, which may not enter it: "+
			"run as %s, or use a pin root of this user's own (--pin-root)",
			ErrUnsafe, dir, who(int(st.Uid)), st.Mode&0o7777, who(euid), who(int(st.Uid)))
	}
	return fmt.Errorf("pin directory %s: %w", dir, err)
}

// UserName names a uid for messages: "root", "nobody (uid 65534)",
// "uid 1234".
func UserName(uid int) string { return who(uid) }

func who(uid int) string {
	if uid == 0 {
		return "root"
	}
	s := "uid " + strconv.Itoa(uid)
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		s = u.Username + " (" + s + ")"
	}
	return s
}

// MkdirOwner makes dir, and any missing parents, owner-only directories of
// the caller, after CheckPath's checks of what exists. Each directory is
// made with mkdir(2) mode 0700 and checked with Lstat afterwards (owner,
// not a symbolic link), its mode set to exactly 0700 whatever the umask;
// an existing dir is narrowed to 0700 if others may read it, and refused
// if others may write in it. dir must be on bpffs (wraps ErrNoBPFFS
// otherwise, and nothing is made), so that a typo in a pin root cannot pin
// into a tmpfs that vanishes with the process.
func MkdirOwner(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("create pin directory %s: %w", dir, err)
	}
	deepest, missing, err := walk(abs)
	if err != nil {
		return err
	}
	ok, err := IsBPFFS(deepest)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s is not on bpffs (%s)", ErrNoBPFFS, dir, howTo(DefaultPath))
	}
	euid := os.Geteuid()
	for missing != "" {
		if err := unix.Mkdir(missing, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create pin directory: %w", &fs.PathError{Op: "mkdir", Path: missing, Err: err})
		}
		// Made by us, or by someone just before us: check it either way.
		last := missing == abs
		if err := checkDir(missing, true, euid); err != nil {
			return err
		}
		if err := ownerOnly(missing); err != nil {
			return err
		}
		if last {
			return nil
		}
		rel, _ := filepath.Rel(missing, abs)
		name, _, _ := cutSlash(rel)
		missing = filepath.Join(missing, name)
	}
	return ownerOnly(abs)
}

// ownerOnly sets mode 0700 on a directory of the caller's unless it is so.
func ownerOnly(p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("stat pin directory %s: %w", p, err)
	}
	if fi.Mode().Perm() != 0o700 || fi.Mode()&(fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid) != 0 {
		if err := os.Chmod(p, 0o700); err != nil {
			return fmt.Errorf("make %s owner-only: %w", p, err)
		}
	}
	return nil
}

package bpffs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/caps"
)

// DefaultPath is where bpffs is conventionally mounted.
const DefaultPath = "/sys/fs/bpf"

// ErrNoBPFFS reports that a path is not on bpffs and bpffs could not be
// mounted there. Errors wrapping it say how to mount it by hand.
var ErrNoBPFFS = errors.New("bpffs not available")

// ErrUnsafe reports a directory on a pin path that another user made or
// may change: what is pinned below it cannot be trusted, nor kept safe.
var ErrUnsafe = errors.New("unsafe pin directory")

// IsBPFFS reports whether path is on a BPF filesystem. A path that does not
// exist is not bpffs and not an error.
func IsBPFFS(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("statfs %s: %w", path, err)
	}
	return uint32(st.Type) == unix.BPF_FS_MAGIC, nil
}

// Mount mounts bpffs at path unless path is already on bpffs, in which case
// it does nothing. The mount point is created (0700) if missing. The root of
// a new mount is owner-only (mode=0700), as systemd mounts it.
//
// Concurrent callers in different processes are serialised with a flock on
// the mount point so that two of them never stack a second bpffs over the
// first (which would hide pins made in the first).
func Mount(path string) error {
	if ok, err := IsBPFFS(path); err != nil {
		return fmt.Errorf("%w at %s: %w", ErrNoBPFFS, path, err)
	} else if ok {
		return nil
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return fmt.Errorf("%w: create mount point %s: %w (%s)", ErrNoBPFFS, path, err, howTo(path))
	}
	// Lock the directory that the mount will cover. A process that opened
	// it before the mount locks the same inode and then sees bpffs on the
	// re-check; one that opens it after the mount gets the bpffs root and
	// sees bpffs straight away.
	if f, err := os.Open(path); err == nil {
		defer f.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err == nil {
			defer unix.Flock(int(f.Fd()), unix.LOCK_UN) //nolint:errcheck // released on close anyway
		}
	}
	if ok, err := IsBPFFS(path); err != nil {
		return fmt.Errorf("%w at %s: %w", ErrNoBPFFS, path, err)
	} else if ok {
		return nil
	}
	if err := unix.Mount("bpf", path, "bpf", 0, "mode=0700"); err != nil {
		hint := howTo(path)
		if errors.Is(err, unix.EPERM) {
			hint = caps.Hint(caps.Of(caps.SysAdmin)) + "; or " + hint
		}
		return fmt.Errorf("%w: mount bpffs at %s: %w (%s)", ErrNoBPFFS, path, err, hint)
	}
	return nil
}

func howTo(path string) string {
	return "mount it: mount -t bpf bpf " + path
}

// Find returns the mount point of a BPF filesystem: DefaultPath if it is
// bpffs, else the first bpffs in /proc/self/mountinfo. It wraps ErrNoBPFFS
// if there is none.
func Find() (string, error) {
	if ok, err := IsBPFFS(DefaultPath); err == nil && ok {
		return DefaultPath, nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("find bpffs: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "bpf" && len(fields) > 4 {
				return unescape(fields[4]), nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("find bpffs: read mountinfo: %w", err)
	}
	return "", fmt.Errorf("%w: nothing mounted (%s)", ErrNoBPFFS, howTo(DefaultPath))
}

// unescape undoes mountinfo's octal escapes (\040 for a space and so on).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + (c - '0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

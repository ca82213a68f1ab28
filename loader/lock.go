package loader

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultLockTimeout is how long a command waits for an interface's lock
// before it gives up and says who holds it.
const DefaultLockTimeout = 10 * time.Second

// ErrLocked: another process (or another lock in this one) holds the
// interface's lock and did not release it in time.
var ErrLocked = errors.New("interface is locked by another command")

// lockPrefix starts the lock directory of an interface in the pin root.
// Escaped interface names never contain ':' (see escapePin), so a lock
// directory can neither be taken for a pin directory nor collide with one.
const lockPrefix = "lock:"

// lockPoll is how often a waiting LockInterface tries again.
const lockPoll = 20 * time.Millisecond

// Lock is an interface's lock, held until Unlock.
type Lock struct {
	f     *os.File
	path  string
	iface string
}

// LockInterface takes the lock of interface iface under root ("":
// DefaultPinRoot), waiting up to timeout (at most one try if timeout <= 0).
// Everything that changes what runs on an interface or what is pinned for
// it (attach, replace, rule changes, detach, removing stale pins) should
// hold it across the whole read-modify-write, from Open to the last write:
// two processes that change the same interface at once would otherwise
// see each other's half-made state. The functions of this package do not
// take it themselves (except CleanStale, which works on every interface);
// the caller does, once per change.
//
// The lock is a flock(2) on a directory root/lock:IFNAME (bpffs holds only
// directories and pinned objects, and an interface's pin directory is
// replaced by rename, so it cannot carry the lock itself). The root is made
// as Attach makes it (mounting bpffs if needed). On timeout the error wraps
// ErrLocked and names the holder's pid and command line.
//
// Unlock removes the directory while it still holds the lock, and a
// waiter that then gets the lock checks that the path still names the
// directory it locked, and tries again if not. Another tool can take part
// in the same way (flock the directory, then check the path).
//
// The lock is released when the process exits, however it exits. It is
// not reentrant: a second LockInterface for the same interface in the same
// process waits for the first to be released.
func LockInterface(root, iface string, timeout time.Duration) (*Lock, error) {
	ctx := "lock " + iface
	if err := checkName("interface", iface); err != nil {
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}
	root = pinRoot(root)
	if err := ensurePinRoot(root); err != nil {
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}
	return lockIface(root, iface, timeout)
}

// lockIface is LockInterface in an existing root.
func lockIface(root, iface string, timeout time.Duration) (*Lock, error) {
	ctx := "lock " + iface
	path := filepath.Join(root, lockPrefix+escapePin(iface))
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		f, err := openLockDir(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ctx, err)
		}
		for {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
			if err == nil || !errors.Is(err, unix.EWOULDBLOCK) || !time.Now().Before(deadline) {
				break
			}
			time.Sleep(lockPoll)
		}
		if err != nil {
			holder, pid := lockHolder(f)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				stop := "stop it if it hangs"
				if pid > 0 && pid != os.Getpid() {
					stop = fmt.Sprintf("stop it if it hangs (kill %d)", pid)
				}
				return nil, fmt.Errorf("%s: %w: %s holds it; gave up after %s: let that command finish and try again, or %s",
					ctx, ErrLocked, holder, time.Since(start).Round(10*time.Millisecond), stop)
			}
			return nil, fmt.Errorf("%s: %w", ctx, wrapErr("flock "+path, err))
		}
		// The holder before us may have removed the directory (Unlock does)
		// after we opened it: then ours is a lock on nothing. Take the
		// one at path now.
		if sameFile(f, path) {
			return &Lock{f: f, path: path, iface: iface}, nil
		}
		f.Close()
	}
}

// openLockDir opens the lock directory at path, making it if needed.
func openLockDir(path string) (*os.File, error) {
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, wrapErr("make lock directory", err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			// Removed by its holder between our mkdir and open: make it
			// again.
			return openLockDir(path)
		}
		return nil, wrapErr("open lock directory "+path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// sameFile reports whether path is still the directory f has open.
func sameFile(f *os.File, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Lstat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// Unlock releases the lock. The lock directory is removed first, while the
// lock is still held, so that a process waiting on it notices (see
// LockInterface) and none can hold a lock on a directory that is gone
// while another holds the new one. Unlock is idempotent.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	var errs []error
	if err := os.Remove(l.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, wrapErr("remove lock directory", err))
	}
	errs = append(errs, l.f.Close()) // closing releases the flock
	l.f = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("unlock %s: %w", l.iface, err)
	}
	return nil
}

// Close is Unlock, for defer and io.Closer.
func (l *Lock) Close() error { return l.Unlock() }

// lockHolder describes who holds the flock on f's inode, from /proc/locks:
// "process 1234 (xdpdrop rules add --iface eth0 ...)", and its pid if
// there is exactly one (0 otherwise).
func lockHolder(f *os.File) (string, int) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "another process", 0
	}
	pids := flockHolders(st.Dev, st.Ino)
	if len(pids) == 0 {
		return "a process this one cannot see (in another pid namespace?)", 0
	}
	var who []string
	for _, pid := range pids {
		s := "process " + strconv.Itoa(pid)
		if pid == os.Getpid() {
			s += " (this process)"
		} else if cmd := cmdline(pid); cmd != "" {
			s += " (" + cmd + ")"
		}
		who = append(who, s)
	}
	if len(pids) > 1 {
		return strings.Join(who, " and "), 0
	}
	return who[0], pids[0]
}

// flockHolders returns the pids holding a FLOCK lock on the inode (dev,
// ino), as /proc/locks shows them. Its lines read
//
//	1: FLOCK  ADVISORY  WRITE 1234 00:1f:5678 0 EOF
//
// with the device as hexadecimal major:minor; waiters' lines have "->"
// after the number.
func flockHolders(dev, ino uint64) []int {
	fh, err := os.Open("/proc/locks")
	if err != nil {
		return nil
	}
	defer fh.Close()
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), ino)
	var pids []int
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 6 || fl[1] != "FLOCK" || fl[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(fl[4]); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cmdline is the command line of process pid, cut to a readable length,
// or "" if it cannot be read.
func cmdline(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

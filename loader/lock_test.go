package loader_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

func init() { children["hold-lock"] = childHoldLock }

// childHoldLock takes the lock of $IFACE under $ROOT, says "locked" on
// stdout, and holds it until its stdin is closed.
func childHoldLock() error {
	l, err := loader.LockInterface(os.Getenv("ROOT"), os.Getenv("IFACE"), 0)
	if err != nil {
		return err
	}
	fmt.Println("locked")
	io.Copy(io.Discard, os.Stdin)
	return l.Unlock()
}

// TestLockTimeoutNamesHolder: a second process waiting for an interface's
// lock gives up after its timeout with an error that names the holder's
// pid and command line and says what to do; once the holder is gone the
// lock is free.
func TestLockTimeoutNamesHolder(t *testing.T) {
	root := testenv.TempPinDir(t)
	const iface = "xdlock0.7" // need not exist; the dot is escaped
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$", "-holder-marker")
	cmd.Env = append(os.Environ(), childEnv+"=hold-lock", "ROOT="+root, "IFACE="+iface)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "locked\n", line)
	pid := cmd.Process.Pid

	start := time.Now()
	_, err = loader.LockInterface(root, iface, 300*time.Millisecond)
	waited := time.Since(start)
	require.ErrorIs(t, err, loader.ErrLocked)
	msg := err.Error()
	require.Contains(t, msg, "process "+strconv.Itoa(pid)+" (", "names the holder's pid: %s", msg)
	require.Contains(t, msg, "-holder-marker", "and its command line: %s", msg)
	require.Contains(t, msg, "kill "+strconv.Itoa(pid), "and what to do: %s", msg)
	require.Contains(t, msg, iface)
	require.GreaterOrEqual(t, waited, 300*time.Millisecond, "it waited for the timeout")
	require.Less(t, waited, 3*time.Second)

	// No wait at all: one try, the same error.
	_, err = loader.LockInterface(root, iface, 0)
	require.ErrorIs(t, err, loader.ErrLocked)

	// The holder lets go: the next one gets it, even while waiting.
	got := make(chan error, 1)
	go func() {
		l, err := loader.LockInterface(root, iface, 10*time.Second)
		if err == nil {
			err = l.Unlock()
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait())
	require.NoError(t, <-got)
	ents, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Empty(t, ents, "no lock directory is left behind")
}

// TestLockExcludes: holders of an interface's lock never overlap, while
// its directory is removed and made again under the waiters; the locks of
// two interfaces are independent; Status and CleanStale pass over a lock
// directory.
func TestLockExcludes(t *testing.T) {
	root := testenv.TempPinDir(t)
	const workers, rounds = 6, 30
	var inside, overlaps, total atomic.Int32
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := loader.LockInterface(root, "xdlock1", 20*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				total.Add(1)
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := l.Unlock(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, overlaps.Load(), "two holders at once")
	require.Equal(t, int32(workers*rounds), total.Load())

	a, err := loader.LockInterface(root, "xdlock1", 0)
	require.NoError(t, err)
	b, err := loader.LockInterface(root, "xdlock2", 0)
	require.NoError(t, err, "another interface's lock is free")
	require.DirExists(t, filepath.Join(root, "lock:xdlock1"))
	sts, err := loader.Status("", root)
	require.NoError(t, err)
	for _, st := range sts {
		require.NotContains(t, st.Interface, "lock:", "a lock is not an interface's pins")
	}
	removed, err := loader.CleanStaleTimeout(root, 0)
	require.NoError(t, err)
	require.Empty(t, removed)

	// Stale pins (a directory with no program) of a locked interface are
	// left to the lock's holder; once it is free, CleanStale removes them.
	require.NoError(t, os.Mkdir(filepath.Join(root, "xdlock1"), 0o700))
	removed, err = loader.CleanStaleTimeout(root, 50*time.Millisecond)
	require.ErrorIs(t, err, loader.ErrLocked)
	require.Contains(t, err.Error(), "(this process)")
	require.Empty(t, removed)
	require.DirExists(t, filepath.Join(root, "xdlock1"))
	require.NoError(t, a.Unlock())
	removed, err = loader.CleanStale(root)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(root, "xdlock1")}, removed)
	require.NoError(t, a.Unlock(), "idempotent")
	require.NoError(t, b.Close())
	ents, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Empty(t, ents)
}

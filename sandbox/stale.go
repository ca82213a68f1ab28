package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netnsDir is where named network namespaces are mounted (ip netns).
const netnsDir = "/run/netns"

// nsName is the namespace name of the pair whose interface names start
// with base (Prefix and the random id), made by process pid:
// "xdpdrop-BASE-PID". RemoveStale reads the pid back.
func nsName(base string, pid int) string {
	return "xdpdrop-" + base + "-" + strconv.Itoa(pid)
}

// parseNSName returns the base and pid of a namespace name nsName made
// with this prefix, and false for every other name.
func parseNSName(name, prefix string) (base string, pid int, ok bool) {
	rest, found := strings.CutPrefix(name, "xdpdrop-"+prefix)
	if !found {
		return "", 0, false
	}
	id, pids, found := strings.Cut(rest, "-")
	if !found || len(id) != 8 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", 0, false
	}
	pid, err := strconv.Atoi(pids)
	if err != nil || pid <= 0 || strconv.Itoa(pid) != pids {
		return "", 0, false
	}
	return prefix + id, pid, true
}

// RemoveStale removes the pairs made with this Prefix whose process ended
// without removing them (killed with SIGKILL, say), and returns the names
// of their namespaces. A pair is stale only if both hold: the process
// whose pid its namespace name carries no longer exists, and nobody holds
// the lock New takes on the namespace (a process in another pid namespace
// still holds it). Only namespaces named as New names them, and the veth
// whose peer is in such a namespace, are ever removed.
func RemoveStale(prefix string) ([]string, error) {
	if prefix == "" || len(prefix) > 4 {
		return nil, fmt.Errorf("sandbox: prefix %q: want 1 to 4 characters", prefix)
	}
	ents, err := os.ReadDir(netnsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: list namespaces: %w", err)
	}
	var removed []string
	var errs []error
	for _, ent := range ents {
		base, pid, ok := parseNSName(ent.Name(), prefix)
		if !ok || processExists(pid) {
			continue
		}
		gone, err := removeIfUnlocked(ent.Name(), base)
		if err != nil {
			errs = append(errs, err)
		}
		if gone {
			removed = append(removed, ent.Name())
		}
	}
	return removed, errors.Join(errs...)
}

// removeIfUnlocked removes namespace name and the veth base+"a" whose peer
// lives in it, if nobody holds the namespace's lock.
func removeIfUnlocked(name, base string) (bool, error) {
	f, err := os.Open(filepath.Join(netnsDir, name))
	if err != nil {
		return false, nil // removed meanwhile, or not a namespace
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, nil // held: in use
	}
	// Deleting the host end deletes the pair. The namespace's end would
	// go with the namespace too, but only once nothing refers to it.
	var errs []error
	if l, err := netlink.LinkByName(base + "a"); err == nil && l.Type() == "veth" {
		if id, err := netlink.GetNetNsIdByFd(int(f.Fd())); err == nil && id >= 0 && l.Attrs().NetNsID == id {
			if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
				errs = append(errs, fmt.Errorf("sandbox: delete stale %s: %w", base+"a", err))
			}
		}
	}
	if err := netns.DeleteNamed(name); err != nil && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("sandbox: delete stale namespace %s: %w", name, err))
		return false, errors.Join(errs...)
	}
	return true, errors.Join(errs...)
}

// processExists reports whether a process with this pid exists (in this
// pid namespace).
func processExists(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

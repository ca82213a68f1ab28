package loader

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/bpffs"
)

// DefaultPinRoot holds one directory of pins per interface.
const DefaultPinRoot = bpffs.DefaultPath + "/xdpdrop"

// Names inside an interface's pin directory.
const (
	pinLink = "link"
	pinProg = "prog"
	pinMeta = "meta"
	pinMaps = "maps"
	// tmpPrefix starts directories and files being filled; the pid after
	// it lets CleanStale tell an interrupted attach from one in progress.
	// Escaped names never contain ':' (see escapePin).
	tmpPrefix = "tmp:"
)

func pinRoot(root string) string {
	if root == "" {
		return DefaultPinRoot
	}
	return filepath.Clean(root)
}

// checkName refuses names that would escape or confuse the pin layout.
func checkName(kind, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("invalid %s name %q for a pin", kind, name)
	}
	return nil
}

// pinEscaper makes interface and map names valid bpffs names: bpffs
// refuses any name with a dot (EPERM, "reserved for future use"), and
// VLAN interfaces are called eth0.100. ':' is escaped too so that no
// escaped name can look like a temporary one.
var pinEscaper = strings.NewReplacer("%", "%25", ".", "%2e", ":", "%3a")

var pinUnescaper = strings.NewReplacer("%25", "%", "%2e", ".", "%3a", ":")

func escapePin(name string) string { return pinEscaper.Replace(name) }

func unescapePin(name string) string { return pinUnescaper.Replace(name) }

// pinDirFor is the pin directory of interface iface under root.
func pinDirFor(root, iface string) string {
	return filepath.Join(pinRoot(root), escapePin(iface))
}

// ensurePinRoot makes root an owner-only directory on bpffs, mounting bpffs
// at /sys/fs/bpf first if root is below it and nothing is mounted there
// (unless this process is in a mount namespace of its own, where that
// bpffs, and the pins in it, would vanish with the namespace). Every
// directory on the way is checked (bpffs.CheckPath): a pin root that
// another user made is refused.
func ensurePinRoot(root string) error {
	if strings.HasPrefix(root+"/", bpffs.DefaultPath+"/") {
		ok, err := bpffs.IsBPFFS(bpffs.DefaultPath)
		if err != nil {
			return wrapErr("pin", err)
		}
		if !ok {
			if initial, known := bpffs.InInitialMountNS(); known && !initial {
				return fmt.Errorf("pin under %s: %w: %s is not bpffs, and this process runs in a mount namespace of its own: "+
					"a bpffs mounted here would vanish with this namespace, and the program with it; "+
					"mount bpffs in the host's mount namespace (mount -t bpf bpf %s there) and make it visible here (a bind mount), "+
					"or run this command in the host's mount namespace",
					root, ErrNoBPFFS, bpffs.DefaultPath, bpffs.DefaultPath)
			}
			if err := bpffs.Mount(bpffs.DefaultPath); err != nil {
				if errors.Is(err, unix.EPERM) { // Mount says what is missing
					return fmt.Errorf("pin: %w: %w", ErrNotPermitted, err)
				}
				return wrapErr("pin", err)
			}
		}
	} else {
		// The nearest existing ancestor must be bpffs: we do not mount
		// bpffs in places the user did not ask for.
		p := root
		for {
			if _, err := os.Stat(p); err == nil || p == "/" || p == "." {
				break
			}
			p = filepath.Dir(p)
		}
		ok, err := bpffs.IsBPFFS(p)
		if err != nil {
			return wrapErr("pin", err)
		}
		if !ok {
			return fmt.Errorf("pin under %s: %w: %s is not on bpffs (mount it: mount -t bpf bpf %s, or pin under %s)",
				root, ErrNoBPFFS, p, p, bpffs.DefaultPath)
		}
	}
	if err := bpffs.MkdirOwner(root); err != nil {
		return wrapErr("pin", err)
	}
	return nil
}

// tmpName makes a name for a temporary pin or directory next to final.
func tmpName(final string) (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(final), fmt.Sprintf("%s%d:%s:%s", tmpPrefix, os.Getpid(), hex.EncodeToString(b[:]), filepath.Base(final))), nil
}

// tmpOwnerAlive reports whether the process that made a temporary name is
// still running.
func tmpOwnerAlive(name string) bool {
	rest, ok := strings.CutPrefix(name, tmpPrefix)
	if !ok {
		return false
	}
	pidStr, _, _ := strings.Cut(rest, ":")
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return false
	}
	err = unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// pinSet is the open objects of one pin directory.
type pinSet struct {
	dir  string
	prog *ebpf.Program
	lnk  link.Link // nil: attached through netlink
	meta *ebpf.Map
	info Meta
	maps map[string]*ebpf.Map
}

func (p *pinSet) close() error {
	var errs []error
	if p.lnk != nil {
		errs = append(errs, p.lnk.Close())
	}
	if p.prog != nil {
		errs = append(errs, p.prog.Close())
	}
	if p.meta != nil {
		errs = append(errs, p.meta.Close())
	}
	for _, m := range p.maps {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}

// loadPins opens everything pinned in dir. It wraps ErrNotPinned if dir
// does not exist, and ErrStale if it is incomplete.
func loadPins(dir string) (_ *pinSet, err error) {
	// Owner and mode of every directory on the way first: pins that
	// another user could have put or moved there are not ours to use.
	if exists, err := bpffs.CheckPath(dir); err != nil {
		return nil, wrapErr("open pins", err)
	} else if !exists {
		return nil, fmt.Errorf("%w at %s", ErrNotPinned, dir)
	}
	p := &pinSet{dir: dir, maps: map[string]*ebpf.Map{}}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if p.prog, err = ebpf.LoadPinnedProgram(filepath.Join(dir, pinProg), nil); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s has no pinned program (remove it with %s)", ErrStale, dir, cleanHint(dir))
		}
		return nil, wrapErr("open pinned program", err)
	}
	if p.meta, err = ebpf.LoadPinnedMap(filepath.Join(dir, pinMeta), nil); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s has no pinned metadata (remove it with %s)", ErrStale, dir, cleanHint(dir))
		}
		return nil, wrapErr("open pinned metadata", err)
	}
	if p.info, err = readMeta(p.meta); err != nil {
		return nil, err
	}
	if l, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil); err == nil {
		p.lnk = l
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, wrapErr("open pinned link", err)
	} else if p.info.Method == MethodLink {
		return nil, fmt.Errorf("%w: %s has no pinned link (remove it with %s)", ErrStale, dir, cleanHint(dir))
	}
	ents, err := os.ReadDir(filepath.Join(dir, pinMaps))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, wrapErr("list pinned maps", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		name := unescapePin(e.Name())
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinMaps, e.Name()), nil)
		if err != nil {
			return nil, wrapErr(fmt.Sprintf("open pinned map %s", name), err)
		}
		p.maps[name] = m
	}
	return p, nil
}

// liveness says whether the pins p describe what runs on the interface
// now, and if not, why. ifc is nil if the interface does not exist.
func (p *pinSet) liveness(name string, ifc *ifaceXDP) (state pinLiveness, why string) {
	progInfo, err := p.prog.Info()
	if err != nil {
		return pinsStale, fmt.Sprintf("pinned program unreadable: %v", err)
	}
	id, _ := progInfo.ID()
	if p.lnk != nil {
		info, err := p.lnk.Info()
		if err != nil {
			return pinsStale, fmt.Sprintf("pinned link unreadable: %v", err)
		}
		x := info.XDP()
		if x == nil || x.Ifindex == 0 {
			if ifc == nil {
				return pinsStale, fmt.Sprintf("interface %s no longer exists (its link was detached)", name)
			}
			if p.info.Ifindex != 0 && p.info.Ifindex != ifc.Index {
				return pinsStale, fmt.Sprintf("interface %s was deleted and created again (ifindex %d, pins are for %d): its link went with the old one", name, ifc.Index, p.info.Ifindex)
			}
			return pinsStale, "its link was detached (the interface went away, or it was detached with bpftool)"
		}
		if ifc == nil || int(x.Ifindex) != ifc.Index {
			// The link still runs, on an interface with another name:
			// removing these pins would detach it.
			other := fmt.Sprintf("ifindex %d", x.Ifindex)
			detach := fmt.Sprintf("'bpftool link detach id %d'", info.ID)
			if l, err := netlink.LinkByIndex(int(x.Ifindex)); err == nil {
				other = fmt.Sprintf("%s (ifindex %d)", l.Attrs().Name, x.Ifindex)
				detach = fmt.Sprintf("'xdpdrop detach --iface %s'", l.Attrs().Name)
			}
			return pinsElsewhere, fmt.Sprintf("its link still runs on %s: the interface was renamed; rename it back to %s to use these pins, or detach it with %s", other, name, detach)
		}
		id = info.Program
	} else if ifc == nil {
		return pinsStale, fmt.Sprintf("interface %s no longer exists", name)
	} else if p.info.Ifindex != ifc.Index {
		return pinsStale, fmt.Sprintf("interface %s was re-created (ifindex %d, pins are for %d)", name, ifc.Index, p.info.Ifindex)
	}
	if ifc == nil {
		return pinsStale, fmt.Sprintf("interface %s no longer exists", name)
	}
	for _, a := range ifc.Progs {
		if a.ID == uint32(id) {
			return pinsLive, ""
		}
	}
	return pinsStale, fmt.Sprintf("program %d is no longer attached to %s", id, name)
}

// pinLiveness is what a pin directory describes.
type pinLiveness int

const (
	// pinsLive: what runs on the interface of that name.
	pinsLive pinLiveness = iota
	// pinsStale: nothing attached; safe to remove.
	pinsStale
	// pinsElsewhere: a link that still runs, on an interface now called
	// differently; removing the pins would detach it.
	pinsElsewhere
)

// otherNetNS reports whether p was made in another network namespace.
func (p *pinSet) otherNetNS() bool {
	ns, err := netnsID()
	return err == nil && p.info.NetNS != 0 && p.info.NetNS != ns
}

// definitelyDead reports, for pins of another namespace, whether they are
// stale in any case: their link was detached.
func (p *pinSet) definitelyDead() bool {
	if p.lnk == nil {
		return false
	}
	info, err := p.lnk.Info()
	if err != nil {
		return false
	}
	x := info.XDP()
	return x == nil || x.Ifindex == 0
}

// pinAll pins a's objects in a temporary directory next to dir and renames
// it to dir, so the directory appears complete or not at all. An existing
// dir (stale pins, or those of an attachment Force replaced) is removed
// first.
func pinAll(dir string, lnk link.Link, prog *ebpf.Program, meta *ebpf.Map, maps map[string]*ebpf.Map) (err error) {
	tmp, err := tmpName(dir)
	if err != nil {
		return fmt.Errorf("pin: %w", err)
	}
	if err := bpffs.MkdirOwner(tmp); err != nil {
		return wrapErr("pin", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, removePins(tmp))
		}
	}()
	if lnk != nil {
		if err := lnk.Pin(filepath.Join(tmp, pinLink)); err != nil {
			return wrapErr("pin link", err)
		}
	}
	if err := pinProgram(prog, filepath.Join(tmp, pinProg)); err != nil {
		return wrapErr("pin program", err)
	}
	if err := pinMap(meta, filepath.Join(tmp, pinMeta)); err != nil {
		return wrapErr("pin metadata", err)
	}
	if len(maps) > 0 {
		if err := bpffs.MkdirOwner(filepath.Join(tmp, pinMaps)); err != nil {
			return wrapErr("pin maps", err)
		}
		for name, m := range maps {
			if err := pinMap(m, filepath.Join(tmp, pinMaps, escapePin(name))); err != nil {
				return wrapErr(fmt.Sprintf("pin map %s", name), err)
			}
		}
	}
	if err := removePins(dir); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return wrapErr(fmt.Sprintf("pin: move pins into %s", dir), err)
	}
	return nil
}

// repin replaces one pinned object in dir atomically (pin under a
// temporary name, rename over the old pin).
func repin(dir, name string, pin func(string) error) error {
	final := filepath.Join(dir, name)
	tmp, err := tmpName(final)
	if err != nil {
		return fmt.Errorf("re-pin %s: %w", name, err)
	}
	if err := pin(tmp); err != nil {
		return wrapErr(fmt.Sprintf("re-pin %s", name), err)
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return wrapErr(fmt.Sprintf("re-pin %s", name), err)
	}
	return nil
}

// removePins removes a pin directory and everything in it; a directory
// that does not exist is not an error.
func removePins(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return wrapErr(fmt.Sprintf("remove pins %s", dir), err)
	}
	return nil
}

// pinProgram pins p at path through a clone, so that p's own idea of where
// it is pinned (which Pin moves rather than copies) never changes.
func pinProgram(p *ebpf.Program, path string) error {
	c, err := p.Clone()
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Pin(path)
}

// pinMap pins m at path through a clone, as pinProgram.
func pinMap(m *ebpf.Map, path string) error {
	c, err := m.Clone()
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Pin(path)
}

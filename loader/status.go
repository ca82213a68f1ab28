package loader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/xdpdrop/xdpdrop/internal/bpffs"
)

// IfaceStatus is what runs on one interface, or, for an interface that no
// longer exists, the pins it left behind. Field names are stable (they are
// `xdpdrop status --json`).
type IfaceStatus struct {
	Interface string `json:"interface"`
	// Index is 0 for an interface that no longer exists.
	Index int `json:"ifindex"`
	// Programs are the XDP programs attached, at most one per mode.
	Programs []ProgStatus `json:"programs"`
	// PinDir is the interface's pin directory, if there is one.
	PinDir string `json:"pin_dir,omitempty"`
	// Stale is set when PinDir holds pins that describe nothing attached;
	// StaleReason says why. CleanStale removes them. Pins whose link still
	// runs on an interface that was renamed are not stale (removing them
	// would detach it): StaleReason says where it runs.
	Stale       bool   `json:"stale"`
	StaleReason string `json:"stale_reason,omitempty"`
}

// ProgStatus is one attached XDP program.
type ProgStatus struct {
	Mode Mode   `json:"mode"`
	ID   uint32 `json:"id"`
	Name string `json:"name"`
	Tag  string `json:"tag"`
	// Method is how it is attached; LinkID is its bpf_link (0: netlink).
	Method Method `json:"method"`
	LinkID uint32 `json:"link_id,omitempty"`
	// Ours is set for a program attached by this package (pinned or not).
	Ours bool `json:"ours"`
	// Opaque is set when the program could not be inspected: opening a
	// program by its id needs CAP_SYS_ADMIN. A pinned one is still known
	// (Pinned, Ours and Meta come from the pins); of another, only Mode
	// and ID are known, and Ours is false though it may be ours (a running
	// redirect's, say).
	Opaque bool `json:"opaque,omitempty"`
	// Pinned is set when PinDir holds this program.
	Pinned bool `json:"pinned"`
	// Meta is what the attachment recorded, for ours.
	Meta *Meta `json:"meta,omitempty"`
}

// Status reports the XDP programs of interface iface, or of every interface
// in the calling thread's namespace if iface is "", with the pins under
// root ("": DefaultPinRoot). Pins of interfaces that no longer exist are
// reported as entries with Index 0 and Stale set. bpffs is not mounted by
// Status: if it is absent nothing is pinned.
func Status(iface, root string) ([]IfaceStatus, error) {
	root = pinRoot(root)
	var ifcs []ifaceXDP
	if iface != "" {
		if err := checkName("interface", iface); err != nil {
			return nil, fmt.Errorf("status: %w", err)
		}
		l, err := lookupLink(iface)
		switch {
		case err == nil:
			x, err := getXDP(l.Attrs().Index)
			if err != nil {
				return nil, fmt.Errorf("status of %s: %w", iface, err)
			}
			ifcs = []ifaceXDP{x}
		case errors.Is(err, ErrNoInterface):
			// Its pins may still be there.
			if exists, serr := bpffs.CheckPath(pinDirFor(root, iface)); serr != nil || !exists {
				return nil, fmt.Errorf("status: %w", err)
			}
		default:
			return nil, fmt.Errorf("status: %w", err)
		}
	} else {
		var err error
		if ifcs, err = listXDP(); err != nil {
			return nil, fmt.Errorf("status: %w", err)
		}
	}

	var links map[linkKey]link.ID
	byName := map[string]*ifaceXDP{}
	out := make([]IfaceStatus, 0, len(ifcs))
	for i := range ifcs {
		ifc := &ifcs[i]
		byName[ifc.Name] = ifc
		st := IfaceStatus{Interface: ifc.Name, Index: ifc.Index, Programs: []ProgStatus{}}
		if len(ifc.Progs) > 0 && links == nil {
			var err error
			if links, err = xdpLinks(); err != nil {
				return nil, fmt.Errorf("status: %w", err)
			}
		}
		occ, err := survey(*ifc, links)
		if err != nil {
			return nil, fmt.Errorf("status of %s: %w", ifc.Name, err)
		}
		pinnedID, stale, why, dir := pinState(root, ifc.Name, ifc)
		st.PinDir, st.Stale, st.StaleReason = dir, stale, why
		for _, o := range occ {
			ps := ProgStatus{Mode: o.Mode, ID: o.ID, Name: o.Name, Tag: o.Tag, Method: MethodNetlink, LinkID: uint32(o.LinkID), Opaque: o.Opaque}
			if o.LinkID != 0 {
				ps.Method = MethodLink
			}
			ps.Pinned = pinnedID != 0 && pinnedID == o.ID
			ps.Ours = o.Meta != nil || ps.Pinned
			ps.Meta = o.Meta
			if ps.Pinned && (ps.Meta == nil || o.Opaque) {
				// Kernel without BPF_PROG_BIND_MAP, or a process that
				// cannot open programs by id: the pins say it all.
				if p, err := loadPins(dir); err == nil {
					m := p.info
					ps.Meta = &m
					ps.Method = m.Method
					if info, err := p.prog.Info(); err == nil {
						ps.Name, ps.Tag = info.Name, info.Tag
					}
					if p.lnk != nil {
						if li, err := p.lnk.Info(); err == nil {
							ps.LinkID = uint32(li.ID)
						}
					}
					p.close()
				}
			}
			st.Programs = append(st.Programs, ps)
		}
		out = append(out, st)
	}

	// Pin directories of interfaces that are gone.
	var ents []os.DirEntry
	if exists, err := bpffs.CheckPath(root); err != nil {
		return nil, fmt.Errorf("status: %w", wrapErr("list pins", err))
	} else if exists {
		if ents, err = os.ReadDir(root); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("status: %w", wrapErr("list pins", err))
		}
	}
	for _, e := range ents {
		n := unescapePin(e.Name())
		if !e.IsDir() || strings.HasPrefix(e.Name(), tmpPrefix) || strings.HasPrefix(e.Name(), lockPrefix) || byName[n] != nil || (iface != "" && n != iface) {
			continue
		}
		if _, err := lookupLink(n); err == nil {
			continue // exists, but not in ifcs (it appeared meanwhile)
		}
		_, stale, why, dir := pinState(root, n, nil)
		if dir == "" {
			continue // another namespace's, and possibly alive
		}
		out = append(out, IfaceStatus{Interface: n, Programs: []ProgStatus{}, PinDir: dir, Stale: stale, StaleReason: why})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if (out[i].Index == 0) != (out[j].Index == 0) {
			return out[i].Index != 0
		}
		if out[i].Index != out[j].Index {
			return out[i].Index < out[j].Index
		}
		return out[i].Interface < out[j].Interface
	})
	return out, nil
}

// pinState looks at root/name: the id of the program pinned there, whether
// the pins are stale and why, and the directory ("" if there is none, or it
// belongs to another namespace and is not known to be dead).
func pinState(root, name string, ifc *ifaceXDP) (progID uint32, stale bool, why, dir string) {
	dir = pinDirFor(root, name)
	if exists, err := bpffs.CheckPath(dir); err != nil {
		return 0, false, fmt.Sprintf("pins not usable: %v", err), dir
	} else if !exists {
		return 0, false, "", ""
	}
	p, err := loadPins(dir)
	if err != nil {
		if errors.Is(err, ErrStale) {
			return 0, true, strings.TrimPrefix(err.Error(), ErrStale.Error()+": "), dir
		}
		return 0, true, fmt.Sprintf("pins unreadable: %v", err), dir
	}
	defer p.close()
	if p.otherNetNS() {
		if p.definitelyDead() {
			return 0, true, "pinned in another network namespace, and its link was detached", dir
		}
		return 0, false, "", ""
	}
	if info, err := p.prog.Info(); err == nil {
		id, _ := info.ID()
		progID = uint32(id)
	}
	switch state, why := p.liveness(name, ifc); state {
	case pinsStale:
		return 0, true, why, dir
	case pinsElsewhere:
		return 0, false, why, dir
	}
	return progID, false, "", dir
}

// CleanStale removes the pin directories under root ("": DefaultPinRoot)
// that describe nothing attached: their interface is gone or re-created,
// or their program was detached by other means, and leftovers of attaches
// that were interrupted. It returns the directories removed. Pins made in
// another network namespace are removed only if their link is known to be
// detached. Each interface's lock (LockInterface) is held while its pins
// are judged and removed, waiting up to DefaultLockTimeout for it.
func CleanStale(root string) ([]string, error) {
	return CleanStaleTimeout(root, DefaultLockTimeout)
}

// CleanStaleTimeout is CleanStale waiting up to lockTimeout for each
// interface's lock. An interface whose lock is not free in time is left
// alone, and the error (wrapping ErrLocked) says who holds it.
func CleanStaleTimeout(root string, lockTimeout time.Duration) ([]string, error) {
	root = pinRoot(root)
	if exists, err := bpffs.CheckPath(root); err != nil {
		return nil, fmt.Errorf("clean stale pins: %w", wrapErr("list pins", err))
	} else if !exists {
		return nil, nil
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("clean stale pins: %w", wrapErr("list pins", err))
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		n := unescapePin(e.Name())
		dir := filepath.Join(root, e.Name())
		if strings.HasPrefix(e.Name(), lockPrefix) {
			continue // held now, or about to be removed by its holder
		}
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if tmpOwnerAlive(e.Name()) {
				continue
			}
		} else {
			if !e.IsDir() {
				continue
			}
			lk, err := lockIface(root, n, lockTimeout)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			ok, err := cleanOne(root, n, dir)
			errs = append(errs, err, lk.Unlock())
			if ok {
				removed = append(removed, dir)
			}
			continue
		}
		if err := removePins(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, dir)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("clean stale pins: %w", err)
	}
	return removed, nil
}

// cleanHint says how to remove the stale pin directory dir: the CLI's
// status --clean where it looks (the default root), else by hand.
func cleanHint(dir string) string {
	if filepath.Dir(dir) == DefaultPinRoot {
		return "'xdpdrop status --clean'"
	}
	return "'rm -r " + dir + "'"
}

// cleanOne removes dir, the pins of interface name under root, if they are
// stale, and reports whether it did. The caller holds the interface's lock.
func cleanOne(root, name, dir string) (bool, error) {
	var ifc *ifaceXDP
	if l, err := lookupLink(name); err == nil {
		x, err := getXDP(l.Attrs().Index)
		if err != nil {
			return false, err
		}
		ifc = &x
	}
	if _, stale, _, d := pinState(root, name, ifc); !stale || d == "" {
		return false, nil
	}
	if err := removePins(dir); err != nil {
		return false, err
	}
	return true, nil
}

// RemoveStalePins removes the pins of interface iface under root ("":
// DefaultPinRoot) if they are definitely stale: their bpf_link was
// detached (the interface was deleted, and perhaps created again with the
// same name, or the link was detached by other means), or, for an
// attachment made through netlink, their program no longer runs on the
// interface it was attached to. Removing such pins cannot detach anything.
// It returns the directory removed and why it was stale, or "" if there
// were no pins or they describe what runs now. Stale pins it cannot be
// sure about (a link that still runs on a renamed interface, pins of
// another network namespace, an incomplete directory with a live link) are
// left, and the error wraps ErrStale and says what to do. The caller
// should hold the interface's lock (LockInterface).
func RemoveStalePins(iface, root string) (dir, why string, err error) {
	ctx := "remove stale pins of " + iface
	if err := checkName("interface", iface); err != nil {
		return "", "", fmt.Errorf("%s: %w", ctx, err)
	}
	dir = pinDirFor(root, iface)
	var ifc *ifaceXDP
	if l, err := lookupLink(iface); err == nil {
		x, err := getXDP(l.Attrs().Index)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", ctx, err)
		}
		ifc = &x
	} else if !errors.Is(err, ErrNoInterface) {
		return "", "", fmt.Errorf("%s: %w", ctx, err)
	}
	p, err := loadPins(dir)
	switch {
	case errors.Is(err, ErrNotPinned):
		return "", "", nil
	case errors.Is(err, ErrStale):
		// Incomplete: safe to remove unless it holds a link that runs.
		if l, lerr := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil); lerr == nil {
			running := linkRuns(l)
			l.Close()
			if running {
				return "", "", fmt.Errorf("%s: %w (its pinned link still runs: detach it with 'xdpdrop detach --iface %s')", ctx, err, iface)
			}
		}
		why = strings.TrimPrefix(err.Error(), ErrStale.Error()+": ")
	case err != nil:
		return "", "", fmt.Errorf("%s: %w", ctx, err)
	default:
		defer p.close()
		if p.otherNetNS() {
			if !p.definitelyDead() {
				return "", "", fmt.Errorf("%s: %w: %s belongs to an interface %s of another network namespace, which may still run it: detach it from within that namespace ('xdpdrop detach --iface %s' run there)",
					ctx, ErrStale, dir, iface, iface)
			}
			why = "pinned in another network namespace, and its link was detached"
			break
		}
		state, w := p.liveness(iface, ifc)
		switch state {
		case pinsLive:
			return "", "", nil
		case pinsElsewhere:
			return "", "", fmt.Errorf("%s: %w at %s: %s", ctx, ErrStale, dir, w)
		}
		if p.lnk == nil {
			// Netlink: the program may still run on the interface it was
			// attached to, under another name.
			if other, ok := netlinkProgRuns(p); ok {
				return "", "", fmt.Errorf("%s: %w at %s: their program still runs on %s (the interface was renamed): rename it back to %s, or detach it with 'xdpdrop detach --iface %s'",
					ctx, ErrStale, dir, other, iface, other)
			}
		}
		why = w
	}
	if err := removePins(dir); err != nil {
		return "", "", fmt.Errorf("%s: %w", ctx, err)
	}
	return dir, why, nil
}

// linkRuns reports whether an XDP bpf_link is still attached to an
// interface (or cannot be told not to be).
func linkRuns(l link.Link) bool {
	info, err := l.Info()
	if err != nil {
		return true
	}
	x := info.XDP()
	return x != nil && x.Ifindex != 0
}

// netlinkProgRuns reports whether the program of netlink-attached pins p
// still runs on the interface index it was attached to, and that
// interface's name.
func netlinkProgRuns(p *pinSet) (string, bool) {
	info, err := p.prog.Info()
	if err != nil {
		return "", false
	}
	id, _ := info.ID()
	x, err := getXDP(p.info.Ifindex)
	if err != nil {
		return "", false
	}
	for _, a := range x.Progs {
		if a.ID == uint32(id) {
			return x.Name, true
		}
	}
	return "", false
}

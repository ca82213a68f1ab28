package loader

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/caps"
)

var errClosed = errors.New("attachment is closed")

// Replace swaps the attached program for prog atomically: every packet
// sees either the old program or the new one, never none. The recorded
// configuration is kept. Pins, if any, are updated to the new program.
func (a *Attachment) Replace(prog *ebpf.Program) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.replace(prog, a.meta.Config)
}

// ReplaceConfig is Replace with a new recorded configuration.
func (a *Attachment) ReplaceConfig(prog *ebpf.Program, config map[string]string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.replace(prog, maps.Clone(config))
}

// ReplaceWithMaps is Replace for a program that brings maps of its own
// (the same program loaded again with bigger tables, say): the program is
// swapped atomically, then newMaps take the place of the attachment's maps,
// and of their pins under MapsDir, each pin by an atomic rename; pins of
// old maps that newMaps lacks are removed. A process that opens the pins
// while this runs may find the new program with some of the old maps.
func (a *Attachment) ReplaceWithMaps(prog *ebpf.Program, newMaps map[string]*ebpf.Map) (err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx := "replace program and maps on " + a.iface
	clones := make(map[string]*ebpf.Map, len(newMaps))
	defer func() {
		if err != nil {
			for _, m := range clones {
				m.Close()
			}
		}
	}()
	for n, m := range newMaps {
		if err := checkName("map", n); err != nil {
			return fmt.Errorf("%s: %w", ctx, err)
		}
		c, err := m.Clone()
		if err != nil {
			return fmt.Errorf("%s: map %s: %w", ctx, n, err)
		}
		clones[n] = c
	}
	names := slices.Sorted(maps.Keys(newMaps))
	old := a.meta.Maps
	a.meta.Maps = names // recorded in the new metadata map
	if err := a.replace(prog, a.meta.Config); err != nil {
		a.meta.Maps = old
		return err
	}
	if a.pinDir != "" {
		var errs []error
		for _, n := range names {
			m := clones[n]
			errs = append(errs, repin(a.MapsDir(), escapePin(n), func(p string) error { return pinMap(m, p) }))
		}
		for _, n := range old {
			if _, ok := clones[n]; !ok {
				if err := os.Remove(filepath.Join(a.MapsDir(), escapePin(n))); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, wrapErr("remove pin of map "+n, err))
				}
			}
		}
		if err := errors.Join(errs...); err != nil {
			// The new program runs; say which pins could not follow.
			a.swapMaps(clones)
			clones = nil
			return fmt.Errorf("%s: the new program runs, but: %w", ctx, err)
		}
	}
	a.swapMaps(clones)
	clones = nil
	return nil
}

// swapMaps makes m the attachment's maps, closing the old ones.
func (a *Attachment) swapMaps(m map[string]*ebpf.Map) {
	for _, old := range a.maps {
		old.Close()
	}
	a.maps = m
}

// linkUpdater is what the XDP bpf_link of cilium/ebpf offers beyond Link.
type linkUpdater interface {
	UpdateArgs(link.RawLinkUpdateOptions) error
}

func (a *Attachment) replace(prog *ebpf.Program, config map[string]string) (err error) {
	ctx := "replace program on " + a.iface
	if a.closed {
		return fmt.Errorf("%s: %w", ctx, errClosed)
	}
	if prog == nil {
		return fmt.Errorf("%s: nil program", ctx)
	}
	if t := prog.Type(); t != ebpf.XDP {
		return fmt.Errorf("%s: program type is %s, want XDP", ctx, t)
	}
	np, err := prog.Clone()
	if err != nil {
		return fmt.Errorf("%s: %w", ctx, err)
	}
	meta := a.meta
	meta.Config = config
	meta.ReplacedAt = time.Now().UTC()
	mm, err := newMetaMap(meta)
	if err != nil {
		np.Close()
		return fmt.Errorf("%s: %w", ctx, err)
	}
	defer func() {
		if err != nil {
			np.Close()
			mm.Close()
		}
	}()
	if err := bindMap(np, mm); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("%s: %w", ctx, wrapErr("bind metadata to program", err))
	}
	if err := a.swap(np, a.prog); err != nil {
		return fmt.Errorf("%s: %w", ctx, err)
	}
	if a.pinDir != "" {
		perr := repin(a.pinDir, pinProg, func(p string) error { return pinProgram(np, p) })
		if perr == nil {
			perr = repin(a.pinDir, pinMeta, func(p string) error { return pinMap(mm, p) })
		}
		if perr != nil {
			// Put the old program back, in the kernel and in the pins.
			errs := []error{perr, a.swap(a.prog, np)}
			errs = append(errs, repin(a.pinDir, pinProg, func(p string) error { return pinProgram(a.prog, p) }))
			errs = append(errs, repin(a.pinDir, pinMeta, func(p string) error { return pinMap(a.metaMap, p) }))
			return fmt.Errorf("%s: %w", ctx, errors.Join(errs...))
		}
	}
	a.prog.Close()
	a.metaMap.Close()
	a.prog, a.metaMap, a.meta = np, mm, meta
	return nil
}

// swap replaces old by np in the kernel, failing if old is not what runs.
func (a *Attachment) swap(np, old *ebpf.Program) error {
	if a.lnk != nil {
		u, ok := a.lnk.(linkUpdater)
		if !ok {
			return a.lnk.Update(np)
		}
		err := u.UpdateArgs(link.RawLinkUpdateOptions{New: np, Old: old, Flags: unix.BPF_F_REPLACE})
		if err == nil {
			return nil
		}
		// The kernel answers EPERM both for a missing privilege and for
		// "the link runs another program than Old": tell them apart.
		if errors.Is(err, unix.EPERM) {
			if info, ierr := a.lnk.Info(); ierr == nil {
				if oi, oerr := old.Info(); oerr == nil {
					if id, _ := oi.ID(); id != info.Program {
						return fmt.Errorf("%w: the link now runs program %d, put there by another process meanwhile: try again", ErrForeign, info.Program)
					}
				}
			}
		}
		if errors.Is(err, unix.ENOLINK) {
			return fmt.Errorf("%w: the link was detached (interface gone, or detached elsewhere)", ErrNotAttached)
		}
		return wrapErr("update link", err)
	}
	err := setXDP(a.ifindex, np.FD(), old.FD(), a.meta.Mode.netlinkFlags()|unix.XDP_FLAGS_REPLACE)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EEXIST):
		return fmt.Errorf("%w: %s no longer runs our program (something replaced or removed it): see what runs there with 'xdpdrop status --iface %s'", ErrForeign, a.iface, a.iface)
	case errors.Is(err, unix.ENODEV):
		return fmt.Errorf("%w: interface %s is gone", ErrNotAttached, a.iface)
	}
	return wrapNeed("netlink replace", err, caps.Of(caps.NetAdmin))
}

// Detach removes the program from the interface and removes its pins. If
// the program was meanwhile replaced by something not ours, that is left
// alone (the error wraps ErrForeign) but our pins are still removed.
func (a *Attachment) Detach() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx := "detach from " + a.iface
	if a.closed {
		return fmt.Errorf("%s: %w", ctx, errClosed)
	}
	var errs []error
	if a.lnk != nil {
		if err := a.lnk.Detach(); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOLINK) {
			errs = append(errs, wrapErr("detach link", err))
		}
	} else {
		err := setXDP(a.ifindex, -1, a.prog.FD(), a.meta.Mode.netlinkFlags()|unix.XDP_FLAGS_REPLACE)
		switch {
		case err == nil, errors.Is(err, unix.ENODEV):
		case errors.Is(err, unix.EEXIST):
			errs = append(errs, fmt.Errorf("%w: %s no longer runs our program, left what runs there alone", ErrForeign, a.iface))
		default:
			errs = append(errs, wrapNeed("netlink detach", err, caps.Of(caps.NetAdmin)))
		}
	}
	if a.pinDir != "" && !errors.Is(errors.Join(errs...), ErrNotPermitted) {
		errs = append(errs, removePins(a.pinDir))
	}
	a.closed = true
	errs = append(errs, a.closeFDs())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %w", ctx, err)
	}
	return nil
}

// Close releases the attachment's file descriptors. A pinned attachment
// stays attached; one that is not pinned is detached. Close is idempotent.
func (a *Attachment) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	var errs []error
	if a.pinDir == "" && a.lnk == nil && a.prog != nil {
		err := setXDP(a.ifindex, -1, a.prog.FD(), a.meta.Mode.netlinkFlags()|unix.XDP_FLAGS_REPLACE)
		if err != nil && !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, wrapErr("detach "+a.iface, err))
		}
	}
	errs = append(errs, a.closeFDs())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close attachment on %s: %w", a.iface, err)
	}
	return nil
}

// Open reopens the attachment pinned for interface iface under root ("":
// DefaultPinRoot), typically in another process than the one that
// attached it. It wraps ErrNotPinned if there are no pins, and ErrStale if
// the pins no longer describe what runs on the interface (remove them with
// CleanStale).
func Open(iface, root string) (_ *Attachment, err error) {
	ctx := "open attachment of " + iface
	if err := checkName("interface", iface); err != nil {
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}
	dir := pinDirFor(root, iface)
	p, err := loadPins(dir)
	if err != nil {
		if errors.Is(err, ErrNotPinned) {
			return nil, fmt.Errorf("%s: %w (see what runs there with 'xdpdrop status --iface %s')", ctx, err, iface)
		}
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if p.otherNetNS() {
		return nil, fmt.Errorf("%s: pins at %s belong to an interface %s of another network namespace: use them from within that namespace", ctx, dir, iface)
	}
	var ifc *ifaceXDP
	if l, err := lookupLink(iface); err == nil {
		x, err := getXDP(l.Attrs().Index)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ctx, err)
		}
		ifc = &x
	} else if !errors.Is(err, ErrNoInterface) {
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}
	switch state, why := p.liveness(iface, ifc); state {
	case pinsStale:
		return nil, fmt.Errorf("%s: %w at %s: %s (remove them with %s)", ctx, ErrStale, dir, why, cleanHint(dir))
	case pinsElsewhere:
		return nil, fmt.Errorf("%s: %w at %s: %s", ctx, ErrStale, dir, why)
	}
	return &Attachment{
		iface:   iface,
		ifindex: ifc.Index,
		prog:    p.prog,
		lnk:     p.lnk,
		metaMap: p.meta,
		meta:    p.info,
		maps:    p.maps,
		pinDir:  dir,
	}, nil
}

// DetachOptions say what DetachInterface may remove.
type DetachOptions struct {
	// PinRoot is where pins are looked for ("": DefaultPinRoot).
	PinRoot string
	// Force removes a program that is not ours too.
	Force bool
}

// DetachInterface removes the XDP program(s) of interface iface: ours,
// pinned or not (an unpinned one is held by a running process, which then
// loses it), and with opts.Force also foreign ones. Pins of the interface
// are removed, stale or not. It wraps ErrForeign if a foreign program is
// left in place, and ErrNotAttached if there was nothing to remove.
func DetachInterface(iface string, opts DetachOptions) error {
	ctx := "detach from " + iface
	removed := false
	if err := checkName("interface", iface); err != nil {
		return fmt.Errorf("%s: %w", ctx, err)
	}
	dir := pinDirFor(opts.PinRoot, iface)
	a, err := Open(iface, opts.PinRoot)
	switch {
	case err == nil:
		if err := a.Detach(); err != nil {
			return err
		}
		removed = true
	case errors.Is(err, ErrStale):
		var ifc *ifaceXDP
		if l, lerr := lookupLink(iface); lerr == nil {
			if x, xerr := getXDP(l.Attrs().Index); xerr == nil {
				ifc = &x
			}
		}
		if _, stale, _, _ := pinState(pinRoot(opts.PinRoot), iface, ifc); !stale {
			return err // pins of a renamed interface: removing them would detach it
		}
		if err := removePins(dir); err != nil {
			return fmt.Errorf("%s: %w", ctx, err)
		}
		removed = true
	case errors.Is(err, ErrNotPinned):
	default:
		return err
	}
	l, err := lookupLink(iface)
	if err != nil {
		if removed && errors.Is(err, ErrNoInterface) {
			return nil
		}
		return fmt.Errorf("%s: %w", ctx, err)
	}
	ifc, err := getXDP(l.Attrs().Index)
	if err != nil {
		return fmt.Errorf("%s: %w", ctx, err)
	}
	occ, err := survey(ifc, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", ctx, err)
	}
	var remove []occupant
	for _, o := range occ {
		if o.Meta == nil && !opts.Force {
			return fmt.Errorf("%s: %w: %s runs %s; remove it with %s, or with 'xdpdrop detach --iface %s --force'",
				ctx, ErrForeign, iface, o.describe(iface), o.howToRemove(iface), iface)
		}
		remove = append(remove, o)
	}
	if len(remove) == 0 {
		if removed {
			return nil
		}
		return fmt.Errorf("%s: %w", ctx, ErrNotAttached)
	}
	ev, err := evict(iface, ifc.Index, remove)
	if err != nil {
		return fmt.Errorf("%s: %w", ctx, errors.Join(err, ev.restore()))
	}
	ev.release()
	return nil
}

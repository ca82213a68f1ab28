package loader

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/caps"
)

// Options say where and how Attach attaches a program.
type Options struct {
	// Interface is the name of the interface, in the calling thread's
	// network namespace.
	Interface string
	// Mode is driver, generic, offload, or auto (the zero value).
	Mode Mode
	// Pin keeps the attachment after the process exits: the link, the
	// program, the metadata and Maps are pinned under PinRoot/Interface.
	Pin bool
	// PinRoot is the directory of per-interface pin directories, on bpffs
	// (default DefaultPinRoot, /sys/fs/bpf/xdpdrop; bpffs is mounted at
	// /sys/fs/bpf if needed).
	PinRoot string
	// Maps are maps a later process will need (to change rules, read
	// counters), by name; they are pinned with the attachment and returned
	// by Attachment.Map. The caller keeps its own handles.
	Maps map[string]*ebpf.Map
	// Config is the configuration the program runs with, as the caller
	// wants it reported by Status and Open (keep it small: at most 64 KiB
	// of JSON with the rest of Meta).
	Config map[string]string
	// Force replaces whatever runs on the interface: a foreign program or
	// one of ours. Without it Attach fails with ErrForeign or
	// ErrAlreadyAttached.
	Force bool
	// Netlink attaches through rtnetlink instead of a bpf_link, as on
	// kernels before 5.9 (where that is also the automatic fallback).
	Netlink bool
}

// Attachment is an XDP program attached to an interface by this package,
// made by Attach or reopened from pins by Open. Its methods are safe for
// concurrent use.
type Attachment struct {
	mu      sync.Mutex
	closed  bool
	iface   string
	ifindex int
	prog    *ebpf.Program // our own handle (a clone of the caller's)
	lnk     link.Link     // nil when attached through netlink
	metaMap *ebpf.Map
	meta    Meta
	maps    map[string]*ebpf.Map
	pinDir  string // "" when not pinned
	// attached is set once the program is on the interface (for undo).
	attached bool
	// runningID caches the kernel's ID of runningProg for Running, which
	// a foreground command calls every second: reading a program's info
	// each time cost more than the rest of that check.
	runningProg *ebpf.Program
	runningID   ebpf.ProgramID
}

// Interface is the name of the interface.
func (a *Attachment) Interface() string { return a.iface }

// Ifindex is the interface's index.
func (a *Attachment) Ifindex() int { return a.ifindex }

// Mode is the mode the program runs in (never ModeAuto).
func (a *Attachment) Mode() Mode { return a.Meta().Mode }

// Method is how the program was attached.
func (a *Attachment) Method() Method { return a.Meta().Method }

// Reason says why this mode was chosen.
func (a *Attachment) Reason() string { return a.Meta().Reason }

// PinDir is the directory of the attachment's pins, "" if not pinned.
func (a *Attachment) PinDir() string { return a.pinDir }

// MapsDir is the directory in which the maps of Options.Maps are pinned,
// each under its own name (escaped like interface names), "" if not
// pinned. A package that pins nothing itself can reopen its maps there.
func (a *Attachment) MapsDir() string {
	if a.pinDir == "" {
		return ""
	}
	return filepath.Join(a.pinDir, pinMaps)
}

// Meta is what the attachment records about itself.
func (a *Attachment) Meta() Meta {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.meta
	m.Maps = slices.Clone(m.Maps)
	m.Config = maps.Clone(m.Config)
	return m
}

// Program is the attached program. It belongs to the Attachment and is
// valid until Close; Clone it to keep it longer.
func (a *Attachment) Program() *ebpf.Program {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.prog
}

// Map returns the named map given in Options.Maps (or found in the pins),
// or nil. It belongs to the Attachment and is valid until Close.
func (a *Attachment) Map(name string) *ebpf.Map {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.maps[name]
}

// Attach attaches prog (an XDP program) to opts.Interface, chooses the mode
// as described in the package documentation, and pins it if opts.Pin. It
// refuses an interface that already runs a program unless opts.Force. On
// error nothing is left attached or pinned, and a program Force removed is
// put back where possible.
func Attach(prog *ebpf.Program, opts Options) (*Attachment, error) {
	return attach(prog, opts, queryFeatures)
}

// attach is Attach with the feature query as a parameter, so that tests
// can take the path of kernels that have none.
func attach(prog *ebpf.Program, opts Options, features func(ifindex int) (Features, error)) (_ *Attachment, err error) {
	if prog == nil {
		return nil, errors.New("attach: nil program")
	}
	if t := prog.Type(); t != ebpf.XDP {
		return nil, fmt.Errorf("attach: program type is %s, want XDP", t)
	}
	if !opts.Mode.valid() {
		return nil, fmt.Errorf("attach: invalid mode %d", opts.Mode)
	}
	for name, m := range opts.Maps {
		if err := checkName("map", name); err != nil {
			return nil, fmt.Errorf("attach: %w", err)
		}
		if m == nil {
			return nil, fmt.Errorf("attach: map %q is nil", name)
		}
	}
	l, err := lookupLink(opts.Interface)
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	name, index := l.Attrs().Name, l.Attrs().Index
	ctx := "attach to " + name

	// Everything that can fail without side effects comes first.
	var dir string
	if opts.Pin {
		if err := checkName("interface", name); err != nil {
			return nil, fmt.Errorf("%s: %w", ctx, err)
		}
		root := pinRoot(opts.PinRoot)
		if err := ensurePinRoot(root); err != nil {
			return nil, fmt.Errorf("%s: %w", ctx, err)
		}
		dir = pinDirFor(root, name)
	}
	ifc, err := getXDP(index)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}
	if dir != "" {
		// Pins already there are replaced if stale or ours; never if they
		// hold a link that runs elsewhere (removing them would detach it).
		if old, err := loadPins(dir); err == nil {
			other := old.otherNetNS()
			state, why := old.liveness(name, &ifc)
			old.close()
			if other {
				return nil, fmt.Errorf("%s: pins at %s belong to an interface %s of another network namespace: detach it from within that namespace first ('xdpdrop detach --iface %s' run there)", ctx, dir, name, name)
			}
			if state == pinsElsewhere {
				return nil, fmt.Errorf("%s: pins at %s are in use: %s", ctx, dir, why)
			}
		}
	}
	occ, err := survey(ifc, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}
	if len(occ) > 0 && !opts.Force {
		return nil, occupiedError(name, occ, pinRoot(opts.PinRoot))
	}
	feats, ferr := features(index)
	if errors.Is(ferr, ErrNoInterface) {
		return nil, fmt.Errorf("%s: %w", ctx, ferr)
	}
	tries, reason, err := chooseMode(name, opts.Mode, feats, ferr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}

	a := &Attachment{iface: name, ifindex: index, maps: map[string]*ebpf.Map{}}
	var ev *evicted
	defer func() {
		if err != nil {
			// Ours off first, then what Force removed back on.
			err = errors.Join(err, a.undo(), ev.restore())
		}
	}()
	if a.prog, err = prog.Clone(); err != nil {
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}
	for n, m := range opts.Maps {
		c, err := m.Clone()
		if err != nil {
			return nil, fmt.Errorf("%s: map %s: %w", ctx, n, err)
		}
		a.maps[n] = c
	}

	// The metadata map, made before anything changes on the interface so
	// that a missing privilege or an oversized Config fails first. It
	// records the first mode to try; if another one is used, it is made
	// again.
	method := MethodLink
	if opts.Netlink {
		method = MethodNetlink
	}
	ns, err := netnsID()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}
	a.meta = Meta{
		Interface:  name,
		Ifindex:    index,
		NetNS:      ns,
		Mode:       tries[0],
		Method:     method,
		Reason:     fmt.Sprintf("%s mode: %s", tries[0], reason),
		AttachedAt: time.Now().UTC(),
		PID:        os.Getpid(),
		Maps:       slices.Sorted(maps.Keys(opts.Maps)),
		Config:     maps.Clone(opts.Config),
	}
	if a.metaMap, err = newMetaMap(a.meta); err != nil {
		return nil, fmt.Errorf("%s: %w", ctx, err)
	}

	if len(occ) > 0 {
		if ev, err = evict(name, index, occ); err != nil {
			return nil, fmt.Errorf("%s: remove what runs there: %w", ctx, err)
		}
	}

	var mode Mode
	var failures []error
	attached := false
	defer func() {
		// What undo needs to detach, if something below fails.
		if attached {
			a.attached, a.meta.Mode, a.meta.Method = true, mode, method
		}
	}()
	for _, m := range tries {
		a.lnk, method, err = attachOne(a.prog, index, m, method)
		if err == nil {
			mode = m
			attached = true
			break
		}
		failures = append(failures, err)
		if !errors.Is(err, ErrModeUnsupported) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ctx, errors.Join(failures...))
	}
	if len(failures) > 0 {
		reason = fmt.Sprintf("%s; %v", reason, failures[0])
	}
	reason = fmt.Sprintf("%s mode: %s", mode, reason)
	if method == MethodNetlink && !opts.Netlink {
		reason += "; attached through netlink (the kernel has no XDP bpf_link, Linux 5.9)"
	}

	if mode != a.meta.Mode || method != a.meta.Method || reason != a.meta.Reason {
		// Not as predicted (a fallback happened): record what is true.
		a.meta.Mode, a.meta.Method, a.meta.Reason = mode, method, reason
		old := a.metaMap
		if a.metaMap, err = newMetaMap(a.meta); err != nil {
			a.metaMap = old
			return nil, fmt.Errorf("%s: %w", ctx, err)
		}
		old.Close()
	}
	if err := bindMap(a.prog, a.metaMap); err != nil && !errors.Is(err, unix.EINVAL) {
		// EINVAL: no BPF_PROG_BIND_MAP (before 5.10); ownership is then
		// known from the pins only.
		return nil, fmt.Errorf("%s: %w", ctx, wrapErr("bind metadata to program", err))
	}
	if opts.Pin {
		if err := pinAll(dir, a.lnk, a.prog, a.metaMap, a.maps); err != nil {
			return nil, fmt.Errorf("%s: %w", ctx, err)
		}
		a.pinDir = dir
	} else if len(occ) > 0 {
		// Force removed an attachment of ours that may have been pinned:
		// its pins now describe nothing.
		dropStalePins(pinDirFor(opts.PinRoot, name), name)
	}
	ev.release()
	return a, nil
}

// chooseMode decides which modes Attach tries, in order, and says why,
// from the device's features or the error of asking for them.
func chooseMode(name string, want Mode, feats Features, ferr error) ([]Mode, string, error) {
	if ferr == nil {
		switch want {
		case ModeAuto:
			if feats&FeatureBasic != 0 {
				return []Mode{ModeDriver}, fmt.Sprintf("the device reports native XDP (xdp-features: %s)", feats), nil
			}
			return []Mode{ModeGeneric}, fmt.Sprintf("the device reports no native XDP (xdp-features: %s)", feats), nil
		case ModeDriver:
			if feats&FeatureBasic == 0 {
				return nil, "", fmt.Errorf("%w: %s has no driver (native) XDP support (xdp-features: %s): use generic mode (slower) or auto",
					ErrModeUnsupported, name, feats)
			}
		case ModeOffload:
			if feats&FeatureHWOffload == 0 {
				return nil, "", fmt.Errorf("%w: %s cannot offload XDP programs (xdp-features: %s): use driver or generic mode",
					ErrModeUnsupported, name, feats)
			}
		}
		return []Mode{want}, fmt.Sprintf("requested (xdp-features: %s)", feats), nil
	}
	if want == ModeAuto {
		return []Mode{ModeDriver, ModeGeneric}, fmt.Sprintf("chosen by trying (%v)", ferr), nil
	}
	return []Mode{want}, fmt.Sprintf("requested (%v)", ferr), nil
}

// attachOne attaches prog in one concrete mode. A bpf_link attach on a
// kernel without XDP links falls back to netlink, reported in the returned
// method.
func attachOne(prog *ebpf.Program, index int, mode Mode, method Method) (link.Link, Method, error) {
	if method == MethodLink {
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: index, Flags: mode.linkFlags()})
		if err == nil {
			return l, MethodLink, nil
		}
		if !isNotSupported(err) {
			return nil, MethodLink, attachErr(index, mode, err)
		}
		method = MethodNetlink
	}
	// UPDATE_IF_NOEXIST: never replace a program that appeared since we
	// looked.
	err := setXDP(index, prog.FD(), -1, mode.netlinkFlags()|unix.XDP_FLAGS_UPDATE_IF_NOEXIST)
	if err != nil {
		return nil, MethodNetlink, attachErr(index, mode, err)
	}
	return nil, MethodNetlink, nil
}

func attachErr(index int, mode Mode, err error) error {
	switch {
	case errors.Is(err, unix.ERANGE):
		// veth's refusal (and the kernel's "numerical result out of
		// range" says nothing): its own MTU or its peer's needs frames of
		// several buffers, which only a frags-aware program may get.
		name, mtu := fmt.Sprintf("interface %d", index), ""
		if l, lerr := netlink.LinkByIndex(index); lerr == nil {
			name, mtu = l.Attrs().Name, fmt.Sprintf(" (%d)", l.Attrs().MTU)
		}
		return fmt.Errorf("%w: %s mode: %w (the MTU of %s%s or of its veth peer is too large for this program in %s mode: "+
			"above about 3,500 bytes only a program that takes multi-buffer frames (loaded from an xdp.frags section) runs there; "+
			"lower the MTU (ip link set dev %s mtu 3500) or use generic mode)", ErrModeUnsupported, mode, err, name, mtu, mode, name)
	case errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("%w: %s mode: %w (the device or driver cannot run XDP this way: try generic mode)", ErrModeUnsupported, mode, err)
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EEXIST):
		return fmt.Errorf("%w: %s mode: %w (another XDP program was attached meanwhile: see what runs there with 'xdpdrop status')", ErrForeign, mode, err)
	}
	return wrapNeed(fmt.Sprintf("%s mode", mode), err, caps.Of(caps.NetAdmin))
}

// evicted is what evict removed from an interface, kept open so that it
// can be put back.
type evicted struct {
	name  string
	index int
	items []evictedProg
}

type evictedProg struct {
	o    occupant
	prog *ebpf.Program
}

// evict removes the programs occ from the interface (for Force). The
// result can put them back (through netlink) if what follows fails; call
// release when it does not.
func evict(name string, index int, occ []occupant) (*evicted, error) {
	e := &evicted{name: name, index: index}
	for _, o := range occ {
		prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(o.ID))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			// Putting it back later needs its fd: by id, CAP_SYS_ADMIN.
			return e, wrapNeed(fmt.Sprintf("open %s to remove it (--force)", o.describe(name)), err, caps.Of(caps.SysAdmin))
		}
		if o.LinkID != 0 {
			l, err := link.NewFromID(o.LinkID)
			if err == nil {
				err = l.Detach()
				l.Close()
			}
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				prog.Close()
				return e, wrapErr(fmt.Sprintf("detach %s", o.describe(name)), err)
			}
		} else if err := setXDP(index, -1, prog.FD(), o.Mode.netlinkFlags()|unix.XDP_FLAGS_REPLACE); err != nil {
			prog.Close()
			return e, wrapErr(fmt.Sprintf("detach %s", o.describe(name)), err)
		}
		e.items = append(e.items, evictedProg{o, prog})
	}
	return e, nil
}

// restore puts the evicted programs back, where their mode is free.
func (e *evicted) restore() error {
	if e == nil {
		return nil
	}
	var errs []error
	for _, r := range slices.Backward(e.items) {
		if err := setXDP(e.index, r.prog.FD(), -1, r.o.Mode.netlinkFlags()|unix.XDP_FLAGS_UPDATE_IF_NOEXIST); err != nil {
			errs = append(errs, fmt.Errorf("could not put back %s on %s: %w", r.o.describe(e.name), e.name, err))
		}
	}
	e.release()
	return errors.Join(errs...)
}

// release closes what evict kept open.
func (e *evicted) release() {
	if e == nil {
		return
	}
	for _, r := range e.items {
		r.prog.Close()
	}
	e.items = nil
}

// undo releases a half-made attachment: detaches it if attached, removes
// nothing pinned (pinAll cleans up after itself).
func (a *Attachment) undo() error {
	var errs []error
	if a.lnk != nil {
		errs = append(errs, a.lnk.Close()) // unpinned: closing detaches
		a.lnk = nil
	} else if a.attached && a.meta.Method == MethodNetlink && a.prog != nil {
		if err := setXDP(a.ifindex, -1, a.prog.FD(), a.meta.Mode.netlinkFlags()|unix.XDP_FLAGS_REPLACE); err != nil {
			errs = append(errs, fmt.Errorf("detach after failed attach: %w", err))
		}
	}
	errs = append(errs, a.closeFDs())
	return errors.Join(errs...)
}

func (a *Attachment) closeFDs() error {
	var errs []error
	if a.lnk != nil {
		errs = append(errs, a.lnk.Close())
		a.lnk = nil
	}
	if a.prog != nil {
		errs = append(errs, a.prog.Close())
		a.prog = nil
	}
	if a.metaMap != nil {
		errs = append(errs, a.metaMap.Close())
		a.metaMap = nil
	}
	for n, m := range a.maps {
		errs = append(errs, m.Close())
		delete(a.maps, n)
	}
	return errors.Join(errs...)
}

// dropStalePins removes dir if it holds pins that no longer describe what
// runs on interface name. Failures are ignored: Status reports such pins
// and CleanStale removes them.
func dropStalePins(dir, name string) {
	p, err := loadPins(dir)
	if err != nil {
		return
	}
	var ifc *ifaceXDP
	if l, err := lookupLink(name); err == nil {
		if x, err := getXDP(l.Attrs().Index); err == nil {
			ifc = &x
		}
	}
	state, _ := p.liveness(name, ifc)
	p.close()
	if state == pinsStale {
		removePins(dir)
	}
}

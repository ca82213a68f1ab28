package loader

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// occupant is a program running on an interface and what we know of it.
type occupant struct {
	Mode   Mode
	ID     uint32
	Name   string
	Tag    string
	LinkID link.ID // 0: attached through netlink (or Opaque)
	Meta   *Meta   // non-nil: ours
	// Opaque: the program could not be opened by its id, which needs
	// CAP_SYS_ADMIN; only the mode and id that rtnetlink reports are
	// known. It is ours only if it is the program pinned for the
	// interface (callers compare ids).
	Opaque bool
}

// linkKey finds the bpf_link of a program on an interface.
type linkKey struct {
	ifindex int
	progID  uint32
}

// xdpLinks maps (ifindex, program id) to the XDP bpf_links in the system.
// Link ifindexes are per namespace, so a link of another namespace with the
// same ifindex and program could be matched; the program id makes that
// vanishingly unlikely. Listing links needs CAP_SYS_ADMIN: without it the
// map is empty, and the programs are opaque to survey too.
func xdpLinks() (map[linkKey]link.ID, error) {
	out := map[linkKey]link.ID{}
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil || info.Type != link.XDPType {
			continue
		}
		if x := info.XDP(); x != nil && x.Ifindex != 0 {
			out[linkKey{int(x.Ifindex), uint32(info.Program)}] = it.ID
		}
	}
	if err := it.Err(); err != nil {
		if isNotSupported(err) || errors.Is(err, unix.EPERM) {
			return out, nil
		}
		return nil, wrapErr("list BPF links", err)
	}
	return out, nil
}

// survey describes the programs rtnetlink reports on ifc. links may be nil,
// in which case it is computed when needed.
func survey(ifc ifaceXDP, links map[linkKey]link.ID) ([]occupant, error) {
	if len(ifc.Progs) == 0 {
		return nil, nil
	}
	if links == nil {
		var err error
		if links, err = xdpLinks(); err != nil {
			return nil, err
		}
	}
	occ := make([]occupant, 0, len(ifc.Progs))
	for _, p := range ifc.Progs {
		o := occupant{Mode: p.Mode, ID: p.ID, LinkID: links[linkKey{ifc.Index, p.ID}]}
		prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(p.ID))
		if errors.Is(err, os.ErrNotExist) {
			continue // detached meanwhile
		}
		if errors.Is(err, unix.EPERM) {
			// BPF_PROG_GET_FD_BY_ID needs CAP_SYS_ADMIN, which nothing
			// else needs: report what rtnetlink says.
			o.Opaque = true
			occ = append(occ, o)
			continue
		}
		if err != nil {
			return nil, wrapErr(fmt.Sprintf("open program id %d on %s", p.ID, ifc.Name), err)
		}
		info, err := prog.Info()
		if err == nil {
			o.Name, o.Tag = info.Name, info.Tag
			var m Meta
			var ours bool
			if m, ours, err = infoMeta(info, ifc.Index); ours {
				o.Meta = &m
			}
		}
		if errors.Is(err, unix.EPERM) {
			o.Opaque, err = true, nil // its maps by id: as above
		}
		prog.Close()
		if err != nil {
			return nil, wrapErr(fmt.Sprintf("inspect program id %d on %s", p.ID, ifc.Name), err)
		}
		occ = append(occ, o)
	}
	return occ, nil
}

// describe says what o is, for error messages.
func (o occupant) describe(iface string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "XDP program %d", o.ID)
	if o.Opaque && o.Name == "" {
		fmt.Fprintf(&b, " (%s mode; not inspectable without CAP_SYS_ADMIN, which this process lacks, so not known to be xdpdrop's)", o.Mode)
		return b.String()
	}
	if o.Name != "" {
		fmt.Fprintf(&b, " %q", o.Name)
	}
	fmt.Fprintf(&b, " (")
	if o.Tag != "" {
		fmt.Fprintf(&b, "tag %s, ", o.Tag)
	}
	fmt.Fprintf(&b, "%s mode, ", o.Mode)
	if o.LinkID != 0 {
		fmt.Fprintf(&b, "bpf_link %d", o.LinkID)
	} else {
		fmt.Fprintf(&b, "attached through netlink")
	}
	b.WriteString(")")
	return b.String()
}

// howToRemove says how to remove a foreign program by hand.
func (o occupant) howToRemove(iface string) string {
	if o.Opaque && o.LinkID == 0 {
		return fmt.Sprintf("`xdpdrop detach --iface %s --force` run as root", iface)
	}
	if o.LinkID != 0 {
		return fmt.Sprintf("`bpftool link detach id %d`", o.LinkID)
	}
	kw := map[Mode]string{ModeDriver: "xdpdrv", ModeGeneric: "xdpgeneric", ModeOffload: "xdpoffload"}[o.Mode]
	return fmt.Sprintf("`ip link set dev %s %s off`", iface, kw)
}

// occupiedError is the error for Attach on an interface that runs
// something already; root is where ours would be pinned.
func occupiedError(iface string, occ []occupant, root string) error {
	// The pinned program's id tells ours from foreign without opening
	// programs by id (which needs CAP_SYS_ADMIN).
	var pinnedID uint32
	var pinned occupant
	var pinDir string
	if p, err := loadPins(pinDirFor(root, iface)); err == nil {
		if info, err := p.prog.Info(); err == nil {
			id, _ := info.ID()
			m := p.info
			pinnedID, pinDir = uint32(id), p.dir
			pinned = occupant{ID: pinnedID, Name: info.Name, Tag: info.Tag, Meta: &m}
			if p.lnk != nil {
				if li, err := p.lnk.Info(); err == nil {
					pinned.LinkID = li.ID
				}
			}
		}
		p.close()
	}
	for i, o := range occ {
		if o.Meta == nil && o.Opaque && pinnedID != 0 && o.ID == pinnedID {
			pinned.Mode = o.Mode
			occ[i] = pinned // known from the pins
			continue
		}
		if o.Meta == nil {
			return fmt.Errorf("attach to %s: %w: %s runs %s; remove it with %s",
				iface, ErrForeign, iface, o.describe(iface), o.howToRemove(iface))
		}
	}
	o := occ[0]
	where := fmt.Sprintf("held by process %d, not pinned under %s", o.Meta.PID, root)
	if pinnedID != 0 && pinnedID == o.ID {
		where = "pinned at " + pinDir
	}
	return fmt.Errorf("attach to %s: %w: %s runs our %s, attached %s, %s; detach it first ('xdpdrop detach --iface %s')",
		iface, ErrAlreadyAttached, iface, o.describe(iface), o.Meta.AttachedAt.Format(time.DateTime), where, iface)
}

package loader

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// occupant is a program running on an interface and what we know of it.
type occupant struct {
	Mode   Mode
	ID     uint32
	Name   string
	Tag    string
	LinkID link.ID // 0: attached through netlink
	Meta   *Meta   // non-nil: ours
}

// linkKey finds the bpf_link of a program on an interface.
type linkKey struct {
	ifindex int
	progID  uint32
}

// xdpLinks maps (ifindex, program id) to the XDP bpf_links in the system.
// Link ifindexes are per namespace, so a link of another namespace with the
// same ifindex and program could be matched; the program id makes that
// vanishingly unlikely.
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
		if isNotSupported(err) {
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
	if o.LinkID != 0 {
		return fmt.Sprintf("`bpftool link detach id %d`", o.LinkID)
	}
	kw := map[Mode]string{ModeDriver: "xdpdrv", ModeGeneric: "xdpgeneric", ModeOffload: "xdpoffload"}[o.Mode]
	return fmt.Sprintf("`ip link set dev %s %s off`", iface, kw)
}

// occupiedError is the error for Attach on an interface that runs
// something already; root is where ours would be pinned.
func occupiedError(iface string, occ []occupant, root string) error {
	for _, o := range occ {
		if o.Meta == nil {
			return fmt.Errorf("attach to %s: %w: %s runs %s; remove it with %s",
				iface, ErrForeign, iface, o.describe(iface), o.howToRemove(iface))
		}
	}
	o := occ[0]
	where := fmt.Sprintf("held by process %d, not pinned under %s", o.Meta.PID, root)
	if p, err := loadPins(pinDirFor(root, iface)); err == nil {
		if info, err := p.prog.Info(); err == nil {
			if id, _ := info.ID(); uint32(id) == o.ID {
				where = "pinned at " + p.dir
			}
		}
		p.close()
	}
	return fmt.Errorf("attach to %s: %w: %s runs our %s, attached %s, %s; detach it first ('xdpdrop detach --iface %s')",
		iface, ErrAlreadyAttached, iface, o.describe(iface), o.Meta.AttachedAt.Format(time.DateTime), where, iface)
}

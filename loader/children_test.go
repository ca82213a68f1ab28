package loader_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/loader"
)

// children are the functions a re-executed test binary can run; they read
// their parameters from the environment and print a childResult.
var children = map[string]func() error{
	"open":          childOpen,
	"attach-pinned": childAttachPinned,
	"unprivileged":  childUnprivileged,
	"no-bpffs":      childNoBPFFS,
	// runs as uid 0 without any capability, like "unprivileged"
	"no-caps-pinned": childNoCapsPinned,
}

// childOpen opens the pinned attachment of $IFACE under $ROOT, reports
// what it found, reads the pinned verdicts map, and detaches if $DETACH.
func childOpen() error {
	a, err := loader.Open(os.Getenv("IFACE"), os.Getenv("ROOT"))
	if err != nil {
		return report(errResult(err))
	}
	info, err := a.Program().Info()
	if err != nil {
		return err
	}
	id, _ := info.ID()
	m := a.Meta()
	res := childResult{ProgName: info.Name, ProgID: uint32(id), Mode: a.Mode().String(), Config: m.Config}
	for _, name := range m.Maps {
		mp := a.Map(name)
		if mp == nil {
			return fmt.Errorf("pinned map %s missing", name)
		}
		var per []gen.BasicCounter
		if err := mp.Lookup(uint32(gen.BasicVerdictVERDICT_DROP), &per); err != nil {
			return fmt.Errorf("read pinned map %s: %w", name, err)
		}
		res.Maps = append(res.Maps, name)
	}
	if os.Getenv("DETACH") == "1" {
		if err := a.Detach(); err != nil {
			return err
		}
	} else if err := a.Close(); err != nil {
		return err
	}
	return report(res)
}

// childAttachPinned attaches xdp_count (dropping) to $IFACE pinned under
// $ROOT, through netlink if $NETLINK, and exits leaving it attached.
func childAttachPinned() error {
	objs, err := loadBasicObjs(gen.BasicVerdictVERDICT_DROP)
	if err != nil {
		return err
	}
	defer objs.Close()
	a, err := loader.Attach(objs.XdpCount, loader.Options{
		Interface: os.Getenv("IFACE"),
		Pin:       true,
		PinRoot:   os.Getenv("ROOT"),
		Maps:      map[string]*ebpf.Map{"verdicts": objs.Verdicts},
		Config:    map[string]string{"owner": "child"},
		Netlink:   os.Getenv("NETLINK") == "1",
	})
	if err != nil {
		return err
	}
	info, err := a.Program().Info()
	if err != nil {
		return err
	}
	id, _ := info.ID()
	if err := a.Close(); err != nil {
		return err
	}
	return report(childResult{ProgID: uint32(id), Mode: a.Mode().String()})
}

// childUnprivileged runs as uid 0 without any capability and tries, with
// the program the parent passed as fd 3: Attach through a bpf_link and
// through netlink to $IFACE, Status of $BUSY_IFACE (which runs a program
// the parent attached), which must work, and a forced DetachInterface of
// it. The others must fail with ErrNotPermitted naming the capabilities
// it lacks; it reports their messages.
func childUnprivileged() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	if os.Getenv("KEEP_BPF_CAPS") == "1" {
		return childNoNetAdmin()
	}
	if data[0].Effective != 0 || data[1].Effective != 0 || data[0].Permitted != 0 {
		return fmt.Errorf("child still has capabilities %#x", data[0].Effective)
	}
	prog, err := ebpf.NewProgramFromFD(3)
	if err != nil {
		return fmt.Errorf("program from parent: %w", err)
	}
	iface, busy := os.Getenv("IFACE"), os.Getenv("BUSY_IFACE")
	var msgs []string
	check := func(what string, err error) error {
		if err == nil {
			return fmt.Errorf("%s succeeded without capabilities", what)
		}
		if !errors.Is(err, loader.ErrNotPermitted) {
			return fmt.Errorf("%s: want ErrNotPermitted, got: %w", what, err)
		}
		msgs = append(msgs, err.Error())
		return nil
	}
	_, err = loader.Attach(prog, loader.Options{Interface: iface})
	if err := check("Attach", err); err != nil {
		return err
	}
	_, err = loader.Attach(prog, loader.Options{Interface: iface, Netlink: true})
	if err := check("Attach through netlink", err); err != nil {
		return err
	}
	// Status needs no capability: a program it cannot open by id
	// (CAP_SYS_ADMIN) is reported as opaque, not as ours.
	sts, err := loader.Status(busy, "")
	if err != nil {
		return fmt.Errorf("Status without capabilities: %w", err)
	}
	if len(sts) != 1 || len(sts[0].Programs) != 1 || !sts[0].Programs[0].Opaque || sts[0].Programs[0].Ours {
		return fmt.Errorf("Status without capabilities: %+v, want one opaque program that is not known to be ours", sts)
	}
	err = loader.DetachInterface(busy, loader.DetachOptions{Force: true})
	if err := check("DetachInterface", err); err != nil {
		return err
	}
	return report(childResult{Maps: msgs})
}

// childNoBPFFS runs in its own mount namespace with an empty read-only
// tmpfs over /sys/fs, so bpffs is absent and cannot be mounted at
// /sys/fs/bpf, and tries a pinned attach with the default pin root.
func childNoBPFFS() error {
	if err := unix.Mount("none", "/sys/fs", "tmpfs", unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("cover /sys/fs: %w", err)
	}
	objs, err := loadBasicObjs(gen.BasicVerdictVERDICT_PASS)
	if err != nil {
		return err
	}
	defer objs.Close()
	_, err = loader.Attach(objs.XdpPass, loader.Options{Interface: os.Getenv("IFACE"), Pin: true})
	r := errResult(err)
	if err == nil {
		r.Err = "attach succeeded"
	}
	return report(r)
}

// childNoNetAdmin has CAP_BPF and CAP_PERFMON but not CAP_NET_ADMIN (nor
// CAP_SYS_ADMIN): it can make maps but not change interfaces.
func childNoNetAdmin() error {
	prog, err := ebpf.NewProgramFromFD(3)
	if err != nil {
		return fmt.Errorf("program from parent: %w", err)
	}
	var msgs []string
	for _, nl := range []bool{false, true} {
		a, err := loader.Attach(prog, loader.Options{Interface: os.Getenv("IFACE"), Netlink: nl})
		if err == nil {
			a.Close()
			msgs = append(msgs, fmt.Sprintf("netlink=%v: attached", nl))
			continue
		}
		if !errors.Is(err, loader.ErrNotPermitted) {
			return fmt.Errorf("netlink=%v: want ErrNotPermitted, got: %w", nl, err)
		}
		msgs = append(msgs, err.Error())
	}
	return report(childResult{Maps: msgs})
}

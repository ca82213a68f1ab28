package loader_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// TestOursWithoutSysAdmin: a process that cannot open programs by id
// (that needs CAP_SYS_ADMIN; this one has no capability at all) still
// tells its pinned attachment from a foreign program by comparing the id
// rtnetlink reports with the pinned program's: Status reports it as ours
// and pinned, a second Attach says it is already attached (not foreign),
// a foreign program is reported as not inspectable, and the pinned one is
// detached through its pins.
func TestOursWithoutSysAdmin(t *testing.T) {
	ours := testenv.NewVeth(t, testenv.VethOptions{})
	foreign := testenv.NewVeth(t, testenv.VethOptions{})
	root := testenv.TempPinDir(t)
	objs := loadBasic(t, gen.BasicVerdictVERDICT_PASS)
	a, err := loader.Attach(objs.XdpPass, loader.Options{Interface: ours.Name, Pin: true, PinRoot: root,
		Maps: map[string]*ebpf.Map{"verdicts": objs.Verdicts}})
	require.NoError(t, err)
	require.NoError(t, a.Close())
	l, err := link.AttachXDP(link.XDPOptions{Program: objs.XdpCount, Interface: foreign.Index, Flags: link.XDPGenericMode})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })

	progFile := os.NewFile(uintptr(dupFD(t, objs.XdpPass.FD())), "prog")
	defer progFile.Close()
	res := runChild(t, "no-caps-pinned", []string{"IFACE=" + ours.Name, "BUSY_IFACE=" + foreign.Name, "ROOT=" + root}, func(c *exec.Cmd) {
		c.ExtraFiles = []*os.File{progFile}
	})
	for _, m := range res.Maps {
		t.Log(m)
	}
	require.Empty(t, res.Err)
	requireClean(t, ours.Name, root)
	require.Len(t, statusOf(t, foreign.Name, "").Programs, 1, "the foreign program is left alone")
}

// childNoCapsPinned is TestOursWithoutSysAdmin's unprivileged side: $IFACE
// runs our program pinned under $ROOT, $BUSY_IFACE a foreign one; fd 3 is
// a program to attach.
func childNoCapsPinned() error {
	iface, busy, root := os.Getenv("IFACE"), os.Getenv("BUSY_IFACE"), os.Getenv("ROOT")
	prog, err := ebpf.NewProgramFromFD(3)
	if err != nil {
		return fmt.Errorf("program from parent: %w", err)
	}
	var msgs []string
	sts, err := loader.Status(iface, root)
	if err != nil {
		return fmt.Errorf("Status of ours: %w", err)
	}
	if len(sts) != 1 || len(sts[0].Programs) != 1 {
		return fmt.Errorf("Status of ours: %+v", sts)
	}
	p := sts[0].Programs[0]
	if !p.Opaque || !p.Ours || !p.Pinned || p.Meta == nil || p.Name != "xdp_pass" || p.LinkID == 0 || p.Method != loader.MethodLink {
		return fmt.Errorf("Status of ours: %+v, want it opaque but known from the pins: ours, pinned, named, with its link", p)
	}
	sts, err = loader.Status(busy, "")
	if err != nil {
		return fmt.Errorf("Status of the foreign one: %w", err)
	}
	if p := sts[0].Programs; len(p) != 1 || !p[0].Opaque || p[0].Ours || p[0].Pinned {
		return fmt.Errorf("Status of the foreign one: %+v, want opaque and not ours", p)
	}

	_, err = loader.Attach(prog, loader.Options{Interface: iface, Pin: true, PinRoot: root})
	if !errors.Is(err, loader.ErrAlreadyAttached) || !strings.Contains(err.Error(), "pinned at") {
		return fmt.Errorf("Attach over our pinned program: %v, want ErrAlreadyAttached, pinned", err)
	}
	msgs = append(msgs, err.Error())
	_, err = loader.Attach(prog, loader.Options{Interface: busy})
	if !errors.Is(err, loader.ErrForeign) || !strings.Contains(err.Error(), "not inspectable without CAP_SYS_ADMIN") {
		return fmt.Errorf("Attach over the foreign program: %v, want ErrForeign saying it cannot be inspected", err)
	}
	msgs = append(msgs, err.Error())
	err = loader.DetachInterface(busy, loader.DetachOptions{})
	if !errors.Is(err, loader.ErrForeign) {
		return fmt.Errorf("DetachInterface of the foreign program: %v, want ErrForeign", err)
	}
	msgs = append(msgs, err.Error())

	// Detaching a bpf_link through its pin needs no capability: the pins'
	// owner-only directory is the privilege.
	if err := loader.DetachInterface(iface, loader.DetachOptions{PinRoot: root}); err != nil {
		return fmt.Errorf("DetachInterface of ours: %w", err)
	}
	return report(childResult{Maps: msgs})
}

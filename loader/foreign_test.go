package loader_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// requireForeign checks that iface runs exactly one program, not ours,
// and returns it.
func requireForeign(t *testing.T, iface string) loader.ProgStatus {
	t.Helper()
	st := statusOf(t, iface, "")
	require.Len(t, st.Programs, 1)
	p := st.Programs[0]
	require.False(t, p.Ours, "%+v", p)
	require.False(t, p.Pinned)
	require.Nil(t, p.Meta)
	return p
}

// TestForeignRefused: programs attached by others (plain netlink, `ip link`,
// a bpf_link of another tool) are never replaced or detached without Force;
// the error says what is there and how to override; with Force they are.
func TestForeignRefused(t *testing.T) {
	objs := loadBasic(t, gen.BasicVerdictVERDICT_DROP)
	other := loadBasic(t, gen.BasicVerdictVERDICT_PASS) // the other tool's copy

	attachers := []struct {
		name   string
		attach func(t *testing.T, v *testenv.Veth)
		mode   loader.Mode
		method loader.Method
		remove string
	}{
		{"netlink", func(t *testing.T, v *testenv.Veth) {
			l, err := netlink.LinkByName(v.Name)
			require.NoError(t, err)
			require.NoError(t, netlink.LinkSetXdpFdWithFlags(l, other.XdpPass.FD(), unix.XDP_FLAGS_DRV_MODE))
		}, loader.ModeDriver, loader.MethodNetlink, "xdpdrv off"},
		{"ip-link", func(t *testing.T, v *testenv.Veth) {
			obj, err := filepath.Abs("../gen/basic_bpfel.o")
			require.NoError(t, err)
			// ip makes directories in bpffs (tc/globals, ip, xdp) when it
			// loads an object: give it a private bpffs in a private mount
			// namespace, so the machine's is left as it was.
			cmd := exec.Command("sh", "-c", `mount -t bpf bpf /sys/fs/bpf && exec ip link set dev "$0" xdpgeneric obj "$1" sec xdp`, v.Name, obj)
			cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
			out, err := cmd.CombinedOutput()
			if err != nil {
				testenv.SkipOrFail(t, "ip link cannot load %s: %v: %s", obj, err, out)
			}
		}, loader.ModeGeneric, loader.MethodNetlink, "xdpgeneric off"},
		{"bpf_link", func(t *testing.T, v *testenv.Veth) {
			l, err := link.AttachXDP(link.XDPOptions{Program: other.XdpPass, Interface: v.Index, Flags: link.XDPDriverMode})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
		}, loader.ModeDriver, loader.MethodLink, "bpftool link detach id"},
	}
	for _, tc := range attachers {
		t.Run(tc.name, func(t *testing.T) {
			v := testenv.NewVeth(t, testenv.VethOptions{})
			root := testenv.TempPinDir(t)
			tc.attach(t, v)
			p := requireForeign(t, v.Name)
			require.Equal(t, tc.mode, p.Mode)
			require.Equal(t, tc.method, p.Method)

			for _, opts := range []loader.Options{
				{Interface: v.Name},
				{Interface: v.Name, Netlink: true},
				{Interface: v.Name, Mode: loader.ModeGeneric, Pin: true, PinRoot: root},
				{Interface: v.Name, Mode: loader.ModeDriver},
			} {
				_, err := loader.Attach(objs.XdpDrop, opts)
				require.ErrorIs(t, err, loader.ErrForeign)
				msg := err.Error()
				require.Contains(t, msg, v.Name)
				require.Contains(t, msg, p.Name)
				require.Contains(t, msg, p.Tag)
				require.Contains(t, msg, tc.mode.String()+" mode")
				require.Contains(t, msg, "remove it with `")
				require.Contains(t, msg, tc.remove)
				require.NotContains(t, msg, "Force", "no Go identifiers in what the CLI prints")
				require.Equal(t, p, requireForeign(t, v.Name), "untouched")
			}
			_, err := loader.Open(v.Name, root)
			require.ErrorIs(t, err, loader.ErrNotPinned)
			err = loader.DetachInterface(v.Name, loader.DetachOptions{PinRoot: root})
			require.ErrorIs(t, err, loader.ErrForeign)
			require.Contains(t, err.Error(), "'xdpdrop detach --iface "+v.Name+" --force'")
			require.Equal(t, p, requireForeign(t, v.Name), "untouched")

			// With Force: replaced by ours, pinned; then detached.
			a, err := loader.Attach(objs.XdpCount, loader.Options{Interface: v.Name, Force: true, Pin: true, PinRoot: root})
			require.NoError(t, err)
			st := statusOf(t, v.Name, root)
			require.Len(t, st.Programs, 1)
			require.True(t, st.Programs[0].Ours)
			require.Equal(t, "xdp_count", st.Programs[0].Name)
			waitCounted(t, v, objs, gen.BasicVerdictVERDICT_DROP)
			require.NoError(t, a.Detach())
			requireClean(t, v.Name, root)

			// DetachInterface with Force removes a foreign program.
			tc.attach(t, v)
			requireForeign(t, v.Name)
			require.NoError(t, loader.DetachInterface(v.Name, loader.DetachOptions{PinRoot: root, Force: true}))
			requireClean(t, v.Name, root)
			err = loader.DetachInterface(v.Name, loader.DetachOptions{PinRoot: root, Force: true})
			require.ErrorIs(t, err, loader.ErrNotAttached)
		})
	}
}

// TestOursReplacedByForeign: when something replaces a netlink attachment
// of ours behind our back, Replace and Detach refuse to touch it.
func TestOursReplacedByForeign(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	root := testenv.TempPinDir(t)
	objs := loadBasic(t, gen.BasicVerdictVERDICT_DROP)
	other := loadBasic(t, gen.BasicVerdictVERDICT_PASS)
	a, err := loader.Attach(objs.XdpDrop, loader.Options{Interface: v.Name, Netlink: true, Pin: true, PinRoot: root})
	require.NoError(t, err)
	l, err := netlink.LinkByName(v.Name)
	require.NoError(t, err)
	require.NoError(t, netlink.LinkSetXdpFdWithFlags(l, other.XdpPass.FD(), unix.XDP_FLAGS_DRV_MODE))
	p := requireForeign(t, v.Name)

	err = a.Replace(objs.XdpCount)
	require.ErrorIs(t, err, loader.ErrForeign)
	require.Equal(t, p, requireForeign(t, v.Name))
	err = a.Detach()
	require.ErrorIs(t, err, loader.ErrForeign)
	require.True(t, strings.Contains(err.Error(), "left what runs there alone"), err.Error())
	require.Equal(t, p, requireForeign(t, v.Name))
	st := statusOf(t, v.Name, root)
	require.Empty(t, st.PinDir, "our pins are removed all the same")
	require.NoError(t, loader.DetachInterface(v.Name, loader.DetachOptions{Force: true}))
}

// TestAlreadyAttached: a second Attach to an interface that runs ours
// says so and how to change it; DetachInterface removes ours, pinned or
// not, without Force.
func TestAlreadyAttached(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	root := testenv.TempPinDir(t)
	objs := loadBasic(t, gen.BasicVerdictVERDICT_DROP)
	for _, pin := range []bool{false, true} {
		a, err := loader.Attach(objs.XdpDrop, loader.Options{Interface: v.Name, Pin: pin, PinRoot: root})
		require.NoError(t, err)
		_, err = loader.Attach(objs.XdpCount, loader.Options{Interface: v.Name, Pin: pin, PinRoot: root})
		require.ErrorIs(t, err, loader.ErrAlreadyAttached)
		require.Contains(t, err.Error(), "detach it first ('xdpdrop detach --iface "+v.Name+"')")
		if pin {
			require.Contains(t, err.Error(), "pinned at "+a.PinDir())
		} else {
			require.Contains(t, err.Error(), "not pinned")
		}
		st := statusOf(t, v.Name, root)
		require.Equal(t, "xdp_drop", st.Programs[0].Name)

		// Force replaces our own too (and its pins).
		b, err := loader.Attach(objs.XdpCount, loader.Options{Interface: v.Name, Pin: pin, PinRoot: root, Force: true})
		require.NoError(t, err)
		st = statusOf(t, v.Name, root)
		require.Len(t, st.Programs, 1)
		require.Equal(t, "xdp_count", st.Programs[0].Name)
		require.Equal(t, pin, st.Programs[0].Pinned)
		require.False(t, st.Stale)
		a.Close()

		require.NoError(t, loader.DetachInterface(v.Name, loader.DetachOptions{PinRoot: root}))
		requireClean(t, v.Name, root)
		require.NoError(t, b.Close())
	}
}

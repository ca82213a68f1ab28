package loader_test

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// TestAttachJumboMTU: on a veth with MTU 9000, driver mode refuses a
// program that does not take multi-buffer frames with ERANGE, which the
// error explains (the MTU, what to do) instead of "numerical result out of
// range" alone; the project's programs (xdp.frags) attach there.
func TestAttachJumboMTU(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{MTU: 9000})
	objs := loadBasic(t, gen.BasicVerdictVERDICT_PASS)
	plain, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "plain_pass", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}, // XDP_PASS
	})
	require.NoError(t, err)
	defer plain.Close()

	for _, nl := range []bool{false, true} {
		_, err := loader.Attach(plain, loader.Options{Interface: v.Name, Mode: loader.ModeDriver, Netlink: nl})
		require.Error(t, err, "netlink %v", nl)
		require.ErrorIs(t, err, unix.ERANGE)
		require.ErrorIs(t, err, loader.ErrModeUnsupported)
		require.Contains(t, err.Error(), "the MTU of "+v.Name+" (9000) or of its veth peer is too large for this program in driver mode")
		require.Contains(t, err.Error(), "ip link set dev "+v.Name+" mtu 3500")
		require.Contains(t, err.Error(), "generic mode")
		requireClean(t, v.Name, "")

		for _, p := range []*ebpf.Program{objs.XdpPass, objs.XdpCount} {
			a, err := loader.Attach(p, loader.Options{Interface: v.Name, Mode: loader.ModeDriver, Netlink: nl})
			require.NoError(t, err, "a frags-aware program attaches in driver mode at MTU 9000 (netlink %v)", nl)
			require.Equal(t, loader.ModeDriver, a.Mode())
			require.NoError(t, a.Close())
			requireClean(t, v.Name, "")
		}
	}
	// Generic mode takes any program at any MTU.
	a, err := loader.Attach(plain, loader.Options{Interface: v.Name, Mode: loader.ModeGeneric})
	require.NoError(t, err)
	require.NoError(t, a.Close())
}

package loader_test

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// TestRemoveStalePins: RemoveStalePins leaves live pins alone, refuses
// (naming the command) pins whose program still runs on a renamed
// interface, and removes pins whose interface was deleted, for bpf_link
// and netlink attachments alike.
func TestRemoveStalePins(t *testing.T) {
	for _, netlinkMethod := range []bool{false, true} {
		name := map[bool]string{false: "bpf_link", true: "netlink"}[netlinkMethod]
		t.Run(name, func(t *testing.T) {
			v := testenv.NewVeth(t, testenv.VethOptions{})
			root := testenv.TempPinDir(t)
			objs := loadBasic(t, gen.BasicVerdictVERDICT_PASS)

			dir, why, err := loader.RemoveStalePins(v.Name, root)
			require.NoError(t, err, "no pins: nothing to do")
			require.Empty(t, dir)
			require.Empty(t, why)

			a, err := loader.Attach(objs.XdpPass, loader.Options{Interface: v.Name, Pin: true, PinRoot: root, Netlink: netlinkMethod})
			require.NoError(t, err)
			pins := a.PinDir()
			require.NoError(t, a.Close())
			dir, _, err = loader.RemoveStalePins(v.Name, root)
			require.NoError(t, err)
			require.Empty(t, dir, "live pins stay")
			require.DirExists(t, pins)

			// Renamed: the program still runs there; removing the pins
			// would lose it (or, for a link, detach it).
			renamed := v.Name[:len(v.Name)-1] + "r"
			ip := func(args ...string) {
				t.Helper()
				out, err := exec.Command("ip", args...).CombinedOutput()
				require.NoError(t, err, "ip %v: %s", args, out)
			}
			ip("link", "set", "dev", v.Name, "down")
			ip("link", "set", "dev", v.Name, "name", renamed)
			_, _, err = loader.RemoveStalePins(v.Name, root)
			require.ErrorIs(t, err, loader.ErrStale)
			require.Contains(t, err.Error(), "'xdpdrop detach --iface "+renamed+"'")
			require.DirExists(t, pins)
			require.Len(t, statusOf(t, renamed, root).Programs, 1, "still attached")

			// Deleted: nothing can run the program any more.
			l, err := netlink.LinkByName(renamed)
			require.NoError(t, err)
			require.NoError(t, netlink.LinkDel(l))
			dir, why, err = loader.RemoveStalePins(v.Name, root)
			require.NoError(t, err)
			require.Equal(t, pins, dir)
			require.Contains(t, why, "no longer exists")
			require.NoDirExists(t, pins)
		})
	}
}

package loader_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// TestPinAcrossProcesses: a pinned attachment outlives its process and is
// found, used and detached by another one, in both directions and through
// both attach methods.
func TestPinAcrossProcesses(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	root := testenv.TempPinDir(t)
	env := []string{"IFACE=" + v.Name, "ROOT=" + root}

	for _, nl := range []bool{false, true} {
		method := loader.MethodLink
		if nl {
			method = loader.MethodNetlink
		}
		t.Run(method.String(), func(t *testing.T) {
			// This process attaches and pins, then exits (Close).
			objs := loadBasic(t, gen.BasicVerdictVERDICT_DROP)
			a, err := loader.Attach(objs.XdpCount, loader.Options{
				Interface: v.Name, Pin: true, PinRoot: root, Netlink: nl,
				Maps:   map[string]*ebpf.Map{"verdicts": objs.Verdicts},
				Config: map[string]string{"rules": "r1"},
			})
			require.NoError(t, err)
			dir := filepath.Join(root, v.Name)
			require.Equal(t, dir, a.PinDir())
			fi, err := os.Stat(dir)
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "pin directory must be owner-only")
			var names []string
			ents, err := os.ReadDir(dir)
			require.NoError(t, err)
			for _, e := range ents {
				names = append(names, e.Name())
			}
			want := []string{"link", "maps", "meta", "prog"}
			if nl {
				want = []string{"maps", "meta", "prog"}
			}
			require.Equal(t, want, names)
			_, err = os.Stat(filepath.Join(dir, "maps", "verdicts"))
			require.NoError(t, err)
			require.NoError(t, a.Close())

			// Still attached, still counting, reported as ours and pinned.
			waitCounted(t, v, objs, gen.BasicVerdictVERDICT_DROP)
			st := statusOf(t, v.Name, root)
			require.Len(t, st.Programs, 1)
			p := st.Programs[0]
			require.True(t, p.Ours)
			require.True(t, p.Pinned)
			require.Equal(t, method, p.Method)
			require.Equal(t, dir, st.PinDir)
			require.False(t, st.Stale)
			require.Equal(t, "r1", p.Meta.Config["rules"])
			require.Equal(t, []string{"verdicts"}, p.Meta.Maps)

			// Another process opens it and reads it.
			res := runChild(t, "open", env, nil)
			require.Empty(t, res.Err)
			require.Equal(t, "xdp_count", res.ProgName)
			require.Equal(t, p.ID, res.ProgID)
			require.Equal(t, "driver", res.Mode)
			require.Equal(t, "r1", res.Config["rules"])
			require.Equal(t, []string{"verdicts"}, res.Maps)
			require.Len(t, statusOf(t, v.Name, root).Programs, 1, "Close in the child must not detach")

			// And detaches it: nothing left.
			res = runChild(t, "open", append(env, "DETACH=1"), nil)
			require.Empty(t, res.Err)
			requireClean(t, v.Name, root)

			// The other way round: a child attaches and exits.
			cenv := env
			if nl {
				cenv = append(cenv, "NETLINK=1")
			}
			res = runChild(t, "attach-pinned", cenv, nil)
			require.Empty(t, res.Err)
			st = statusOf(t, v.Name, root)
			require.Len(t, st.Programs, 1)
			p = st.Programs[0]
			require.Equal(t, res.ProgID, p.ID)
			require.True(t, p.Ours)
			require.True(t, p.Pinned)
			require.Equal(t, "child", p.Meta.Config["owner"])
			require.NotEqual(t, os.Getpid(), p.Meta.PID)

			b, err := loader.Open(v.Name, root)
			require.NoError(t, err)
			require.Equal(t, method, b.Method())
			m := b.Map("verdicts")
			require.NotNil(t, m)
			before := counted(t, m, gen.BasicVerdictVERDICT_DROP)
			f := startFlow(t, v)
			f.waitSent(t, 100)
			f.close()
			require.Eventually(t, func() bool { return counted(t, m, gen.BasicVerdictVERDICT_DROP) > before }, 10e9, 1e6,
				"the program the child pinned counts into the map it pinned")
			require.NoError(t, b.Detach())
			requireClean(t, v.Name, root)
			_, err = os.Stat(dir)
			require.ErrorIs(t, err, os.ErrNotExist)
		})
	}
}

// TestStalePins: pins whose interface vanished, whose program was removed
// by other means, or which an interrupted attach left, are reported by
// Status and removed by CleanStale; Open refuses them.
func TestStalePins(t *testing.T) {
	root := testenv.TempPinDir(t)
	objs := loadBasic(t, gen.BasicVerdictVERDICT_PASS)

	// 1. The interface goes away under a pinned bpf_link.
	gone := testenv.NewVeth(t, testenv.VethOptions{})
	a, err := loader.Attach(objs.XdpPass, loader.Options{Interface: gone.Name, Pin: true, PinRoot: root})
	require.NoError(t, err)
	require.NoError(t, a.Close())
	require.NoError(t, exec.Command("ip", "link", "del", "dev", gone.Name).Run())

	// 2. A netlink attachment is removed behind our back.
	v := testenv.NewVeth(t, testenv.VethOptions{})
	a, err = loader.Attach(objs.XdpPass, loader.Options{Interface: v.Name, Pin: true, PinRoot: root, Netlink: true})
	require.NoError(t, err)
	require.NoError(t, a.Close())
	out, err := exec.Command("ip", "link", "set", "dev", v.Name, "xdpdrv", "off").CombinedOutput()
	require.NoError(t, err, "%s", out)

	// 3. An attach was interrupted: a temporary directory of a dead process.
	pid := deadPID(t)
	tmp := filepath.Join(root, "tmp:"+pid+":0badc0de:"+v.Name)
	require.NoError(t, os.Mkdir(tmp, 0o700))
	// ... and one of a live process (this one), which must stay.
	live := filepath.Join(root, "tmp:"+itoa(os.Getpid())+":0badc0de:x")
	require.NoError(t, os.Mkdir(live, 0o700))

	sts, err := loader.Status("", root)
	require.NoError(t, err)
	byName := map[string]loader.IfaceStatus{}
	for _, s := range sts {
		byName[s.Interface] = s
	}
	g := byName[gone.Name]
	require.True(t, g.Stale, "%+v", g)
	require.Zero(t, g.Index)
	require.Contains(t, g.StaleReason, "no longer exists")
	s := byName[v.Name]
	require.True(t, s.Stale, "%+v", s)
	require.Contains(t, s.StaleReason, "no longer attached")
	require.Empty(t, s.Programs)

	one, err := loader.Status(gone.Name, root)
	require.NoError(t, err, "status of a vanished interface with pins")
	require.Len(t, one, 1)
	require.True(t, one[0].Stale)

	_, err = loader.Open(gone.Name, root)
	require.ErrorIs(t, err, loader.ErrStale)
	require.Contains(t, err.Error(), "(remove them with 'rm -r "+filepath.Join(root, gone.Name)+"')", "a root the CLI does not use: by hand")
	_, err = loader.Open(v.Name, root)
	require.ErrorIs(t, err, loader.ErrStale)

	removed, err := loader.CleanStale(root)
	require.NoError(t, err)
	sort.Strings(removed)
	want := []string{filepath.Join(root, gone.Name), filepath.Join(root, v.Name), tmp}
	sort.Strings(want)
	require.Equal(t, want, removed)
	ents, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	require.Equal(t, filepath.Base(live), ents[0].Name())
	requireClean(t, v.Name, root)
}

// TestRenamedInterface: pins whose link still runs on an interface that
// was renamed are not stale and are never removed by CleanStale (that
// would detach it); the program is still recognised as ours under the new
// name.
func TestRenamedInterface(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	root := testenv.TempPinDir(t)
	objs := loadBasic(t, gen.BasicVerdictVERDICT_PASS)
	a, err := loader.Attach(objs.XdpPass, loader.Options{Interface: v.Name, Pin: true, PinRoot: root})
	require.NoError(t, err)
	require.NoError(t, a.Close())

	renamed := v.Name[:len(v.Name)-1] + "r"
	ip := func(args ...string) {
		t.Helper()
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %v: %s", args, out)
	}
	ip("link", "set", "dev", v.Name, "down")
	ip("link", "set", "dev", v.Name, "name", renamed)
	t.Cleanup(func() { // testenv removes the pair by its first name
		exec.Command("ip", "link", "set", "dev", renamed, "name", v.Name).Run()
	})

	st := statusOf(t, renamed, root)
	require.Len(t, st.Programs, 1)
	require.True(t, st.Programs[0].Ours, "ours under its new name")
	require.False(t, st.Programs[0].Pinned)

	old := statusOf(t, v.Name, root)
	require.False(t, old.Stale)
	require.Contains(t, old.StaleReason, renamed)
	removed, err := loader.CleanStale(root)
	require.NoError(t, err)
	require.Empty(t, removed)
	err = loader.DetachInterface(v.Name, loader.DetachOptions{PinRoot: root})
	require.ErrorIs(t, err, loader.ErrStale)
	require.Len(t, statusOf(t, renamed, root).Programs, 1, "still attached")

	// Detach it by its new name; the old pins are then stale.
	require.NoError(t, loader.DetachInterface(renamed, loader.DetachOptions{PinRoot: root}))
	require.Empty(t, statusOf(t, renamed, root).Programs)
	require.True(t, statusOf(t, v.Name, root).Stale)
	removed, err = loader.CleanStale(root)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(root, v.Name)}, removed)
}

// TestPinDottedName: bpffs refuses names with dots; an interface called
// like a VLAN (NAME.5: the veth renamed, as this kernel has no 8021q) is
// pinned under an escaped name and found again.
func TestPinDottedName(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	root := testenv.TempPinDir(t)
	objs := loadBasic(t, gen.BasicVerdictVERDICT_PASS)
	vlan := v.Name + ".5"
	out, err := exec.Command("ip", "link", "set", "dev", v.Name, "name", vlan).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { // testenv removes the pair by its first name
		exec.Command("ip", "link", "set", "dev", vlan, "name", v.Name).Run()
	})

	a, err := loader.Attach(objs.XdpPass, loader.Options{Interface: vlan, Pin: true, PinRoot: root,
		Maps: map[string]*ebpf.Map{"verdicts.v1": objs.Verdicts}})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, v.Name+"%2e5"), a.PinDir())
	require.NoError(t, a.Close())
	st := statusOf(t, vlan, root)
	require.Len(t, st.Programs, 1)
	require.True(t, st.Programs[0].Pinned)
	b, err := loader.Open(vlan, root)
	require.NoError(t, err)
	require.NotNil(t, b.Map("verdicts.v1"))
	require.NoError(t, b.Detach())
	requireClean(t, vlan, root)
}

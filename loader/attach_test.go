package loader_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// waitCounted sends UDP from the peer until the program counted at least
// one packet under verdict: the program really runs on the interface.
func waitCounted(t *testing.T, v *testenv.Veth, objs *gen.BasicObjects, verdict gen.BasicVerdict) {
	t.Helper()
	before := counted(t, objs.Verdicts, verdict)
	var conn *net.UDPConn
	require.NoError(t, v.InPeerNS(func() error {
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(198, 18, 0, 1), Port: flowPort})
		conn = c
		return err
	}))
	defer conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	for counted(t, objs.Verdicts, verdict) == before {
		if time.Now().After(deadline) {
			t.Fatalf("no packet counted by the attached program")
		}
		conn.Write(flowPayload)
		time.Sleep(time.Millisecond)
	}
}

// TestAttachModes attaches in every mode the veth supports, through both a
// bpf_link and netlink, and checks that the program runs (it counts the
// peer's packets), that Status reports it as ours in that mode, and that
// Close of an unpinned attachment detaches it.
func TestAttachModes(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	objs := loadBasic(t, gen.BasicVerdictVERDICT_DROP)
	for _, tc := range []struct {
		mode, want loader.Mode
	}{
		{loader.ModeDriver, loader.ModeDriver},
		{loader.ModeGeneric, loader.ModeGeneric},
		{loader.ModeAuto, loader.ModeDriver}, // veth has native XDP
	} {
		for _, nl := range []bool{false, true} {
			method := loader.MethodLink
			if nl {
				method = loader.MethodNetlink
			}
			t.Run(tc.mode.String()+"/"+method.String(), func(t *testing.T) {
				a, err := loader.Attach(objs.XdpCount, loader.Options{
					Interface: v.Name, Mode: tc.mode, Netlink: nl,
					Config: map[string]string{"test": t.Name()},
				})
				require.NoError(t, err)
				require.Equal(t, tc.want, a.Mode())
				require.Equal(t, method, a.Method())
				require.Contains(t, a.Reason(), tc.want.String())
				if tc.mode == loader.ModeAuto {
					require.Contains(t, a.Reason(), "xdp-features: basic")
				}
				t.Log(a.Reason())

				waitCounted(t, v, objs, gen.BasicVerdictVERDICT_DROP)

				st := statusOf(t, v.Name, "")
				require.Len(t, st.Programs, 1)
				p := st.Programs[0]
				require.Equal(t, tc.want, p.Mode)
				require.Equal(t, method, p.Method)
				require.Equal(t, "xdp_count", p.Name)
				require.True(t, p.Ours)
				require.False(t, p.Pinned)
				require.Len(t, p.Tag, 16)
				require.NotNil(t, p.Meta)
				require.Equal(t, t.Name(), p.Meta.Config["test"])
				require.Equal(t, v.Name, p.Meta.Interface)
				if nl {
					require.Zero(t, p.LinkID)
				} else {
					require.NotZero(t, p.LinkID)
				}

				require.NoError(t, a.Close())
				requireClean(t, v.Name, "")
			})
		}
	}
}

// TestAutoGenericWithoutNativeXDP attaches to the loopback device of the
// veth's peer namespace (a namespace the test made): lo has no native XDP,
// so auto picks generic mode and says why, and driver mode is refused
// before anything is attached.
func TestAutoGenericWithoutNativeXDP(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	objs := loadBasic(t, gen.BasicVerdictVERDICT_PASS)
	require.NoError(t, v.InPeerNS(func() error {
		for _, nl := range []bool{false, true} {
			a, err := loader.Attach(objs.XdpPass, loader.Options{Interface: "lo", Netlink: nl})
			require.NoError(t, err)
			require.Equal(t, loader.ModeGeneric, a.Mode())
			require.Contains(t, a.Reason(), "no native XDP")
			require.Contains(t, a.Reason(), "xdp-features: none")
			st := statusOf(t, "lo", "")
			require.Len(t, st.Programs, 1)
			require.Equal(t, loader.ModeGeneric, st.Programs[0].Mode)
			require.True(t, st.Programs[0].Ours)
			require.NoError(t, a.Close())
			requireClean(t, "lo", "")

			_, err = loader.Attach(objs.XdpPass, loader.Options{Interface: "lo", Mode: loader.ModeDriver, Netlink: nl})
			require.ErrorIs(t, err, loader.ErrModeUnsupported)
			require.Contains(t, err.Error(), "generic")
			requireClean(t, "lo", "")
		}
		return nil
	}))
}

// TestOffloadRefused: veth cannot offload, and says so before trying.
func TestOffloadRefused(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	objs := loadBasic(t, gen.BasicVerdictVERDICT_PASS)
	for _, nl := range []bool{false, true} {
		_, err := loader.Attach(objs.XdpPass, loader.Options{Interface: v.Name, Mode: loader.ModeOffload, Netlink: nl})
		require.ErrorIs(t, err, loader.ErrModeUnsupported)
		require.Contains(t, err.Error(), "cannot offload")
		require.Contains(t, err.Error(), "driver or generic")
		requireClean(t, v.Name, "")
	}
}

// TestXDPFeatures asks the kernel what a veth can do.
func TestXDPFeatures(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	f, err := loader.XDPFeatures(v.Name)
	require.NoError(t, err)
	require.NotZero(t, f&loader.FeatureBasic, "veth reports %s", f)
	require.Zero(t, f&loader.FeatureHWOffload, "veth reports %s", f)
	_, err = loader.XDPFeatures("xdpnosuch0")
	require.ErrorIs(t, err, loader.ErrNoInterface)
}

// TestNoSuchInterface: every entry point names the missing interface.
func TestNoSuchInterface(t *testing.T) {
	objs := loadBasic(t, gen.BasicVerdictVERDICT_PASS)
	const name = "xdpnosuch0"
	_, err := loader.Attach(objs.XdpPass, loader.Options{Interface: name})
	require.ErrorIs(t, err, loader.ErrNoInterface)
	require.Contains(t, err.Error(), name)
	require.Contains(t, err.Error(), "ip link")
	_, err = loader.Status(name, testenv.TempPinDir(t))
	require.ErrorIs(t, err, loader.ErrNoInterface)
	_, err = loader.Open(name, testenv.TempPinDir(t))
	require.ErrorIs(t, err, loader.ErrNotPinned)
	err = loader.DetachInterface(name, loader.DetachOptions{PinRoot: testenv.TempPinDir(t)})
	require.ErrorIs(t, err, loader.ErrNoInterface)
	require.False(t, strings.Contains(err.Error(), "%!"), err.Error())
}

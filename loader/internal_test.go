package loader

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

func TestModeNames(t *testing.T) {
	for _, m := range []Mode{ModeAuto, ModeDriver, ModeGeneric, ModeOffload} {
		got, err := ParseMode(m.String())
		require.NoError(t, err)
		require.Equal(t, m, got)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		var back Mode
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, m, back)
	}
	for in, want := range map[string]Mode{"native": ModeDriver, "DRV": ModeDriver, "skb": ModeGeneric, "hw": ModeOffload, "": ModeAuto} {
		got, err := ParseMode(in)
		require.NoError(t, err)
		require.Equal(t, want, got, in)
	}
	_, err := ParseMode("turbo")
	require.ErrorContains(t, err, "auto, driver, generic or offload")
	require.Equal(t, "Mode(9)", Mode(9).String())
	_, err = json.Marshal(Mode(9))
	require.Error(t, err)
	for _, m := range []Method{MethodLink, MethodNetlink} {
		b, err := json.Marshal(m)
		require.NoError(t, err)
		var back Method
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, m, back)
	}
}

func TestFeaturesString(t *testing.T) {
	require.Equal(t, "none", Features(0).String())
	require.Equal(t, "basic,redirect,rx-sg", (FeatureBasic | FeatureRedirect | FeatureRxSG).String())
	require.Equal(t, "hw-offload,0x100", (FeatureHWOffload | 1<<8).String())
}

// TestChooseMode covers the decision for every mode, with and without the
// kernel's feature query.
func TestChooseMode(t *testing.T) {
	native := FeatureBasic | FeatureRedirect
	noQuery := errors.New("no netdev family")
	for _, tc := range []struct {
		want   Mode
		feats  Features
		ferr   error
		tries  []Mode
		reason string
		err    error
	}{
		{ModeAuto, native, nil, []Mode{ModeDriver}, "reports native XDP", nil},
		{ModeAuto, 0, nil, []Mode{ModeGeneric}, "reports no native XDP", nil},
		{ModeAuto, 0, noQuery, []Mode{ModeDriver, ModeGeneric}, "chosen by trying", nil},
		{ModeDriver, native, nil, []Mode{ModeDriver}, "requested", nil},
		{ModeDriver, 0, nil, nil, "", ErrModeUnsupported},
		{ModeDriver, 0, noQuery, []Mode{ModeDriver}, "requested", nil},
		{ModeGeneric, 0, nil, []Mode{ModeGeneric}, "requested", nil},
		{ModeOffload, native, nil, nil, "", ErrModeUnsupported},
		{ModeOffload, native | FeatureHWOffload, nil, []Mode{ModeOffload}, "requested", nil},
		{ModeOffload, 0, noQuery, []Mode{ModeOffload}, "requested", nil},
	} {
		tries, reason, err := chooseMode("eth9", tc.want, tc.feats, tc.ferr)
		if tc.err != nil {
			require.ErrorIs(t, err, tc.err, "%+v", tc)
			require.Contains(t, err.Error(), "eth9")
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.tries, tries, "%+v", tc)
		require.Contains(t, reason, tc.reason)
	}
}

func TestPinNames(t *testing.T) {
	for _, n := range []string{"eth3", "eth3.100", "a%2eb", "x:y", "%"} {
		e := escapePin(n)
		require.NotContains(t, e, ".", "bpffs refuses dots")
		require.NotContains(t, e, ":", "reserved for temporary names")
		require.Equal(t, n, unescapePin(e))
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a\x00"} {
		require.Error(t, checkName("interface", bad), "%q", bad)
	}
	require.False(t, tmpOwnerAlive("tmp:notapid:x"))
	require.False(t, tmpOwnerAlive("eth3"))
}

func TestParseXDPAttr(t *testing.T) {
	attr := func(typ uint16, v []byte) []byte {
		b := make([]byte, 4+len(v))
		b[0], b[2] = byte(4+len(v)), byte(typ)
		copy(b[4:], v)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	u32 := func(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }
	var b []byte
	b = append(b, attr(unix.IFLA_XDP_ATTACHED, []byte{xdpAttachedMulti})...)
	b = append(b, attr(unix.IFLA_XDP_DRV_PROG_ID, u32(7))...)
	b = append(b, attr(unix.IFLA_XDP_HW_PROG_ID, u32(9))...)
	progs, err := parseXDPAttr(b)
	require.NoError(t, err)
	require.Equal(t, []xdpProg{{ModeDriver, 7}, {ModeOffload, 9}}, progs)

	b = append(attr(unix.IFLA_XDP_ATTACHED, []byte{xdpAttachedSKB}), attr(unix.IFLA_XDP_PROG_ID, u32(3))...)
	progs, err = parseXDPAttr(b)
	require.NoError(t, err)
	require.Equal(t, []xdpProg{{ModeGeneric, 3}}, progs)
}

// TestAutoByTrying takes the path of kernels without the xdp-features
// query (before 6.3): auto tries driver mode and falls back to generic
// where the device has no native XDP, saying so.
func TestAutoByTrying(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	objs := loadObjs(t)
	noQuery := func(int) (Features, error) { return 0, ErrNoFeatureQuery }

	a, err := attach(objs.XdpPass, Options{Interface: v.Name}, noQuery)
	require.NoError(t, err)
	require.Equal(t, ModeDriver, a.Mode())
	require.Contains(t, a.Reason(), "chosen by trying")
	require.NoError(t, a.Close())

	require.NoError(t, v.InPeerNS(func() error {
		for _, nl := range []bool{false, true} {
			a, err := attach(objs.XdpPass, Options{Interface: "lo", Netlink: nl}, noQuery)
			require.NoError(t, err)
			require.Equal(t, ModeGeneric, a.Mode())
			require.Contains(t, a.Reason(), "chosen by trying")
			require.Contains(t, a.Reason(), "driver mode")
			m, ours, err := progMeta(a.Program(), a.Ifindex())
			require.NoError(t, err)
			require.True(t, ours)
			require.Equal(t, ModeGeneric, m.Mode, "the metadata records the mode used, not the first tried")
			require.Equal(t, a.Reason(), m.Reason)
			require.NoError(t, a.Close())

			// Driver mode asked for, no query: the kernel refuses, and
			// nothing is left.
			_, err = attach(objs.XdpPass, Options{Interface: "lo", Mode: ModeDriver, Netlink: nl}, noQuery)
			require.ErrorIs(t, err, ErrModeUnsupported)
			x, err := getXDP(1)
			require.NoError(t, err)
			require.Empty(t, x.Progs)
		}
		return nil
	}))
}

// TestEvictRestore: what Force removes is put back when the attach that
// follows fails.
func TestEvictRestore(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	objs := loadObjs(t)
	l, err := netlink.LinkByName(v.Name)
	require.NoError(t, err)
	require.NoError(t, netlink.LinkSetXdpFdWithFlags(l, objs.XdpPass.FD(), unix.XDP_FLAGS_SKB_MODE))
	before, err := getXDP(v.Index)
	require.NoError(t, err)
	occ, err := survey(before, nil)
	require.NoError(t, err)
	require.Len(t, occ, 1)
	require.Nil(t, occ[0].Meta)

	ev, err := evict(v.Name, v.Index, occ)
	require.NoError(t, err)
	x, err := getXDP(v.Index)
	require.NoError(t, err)
	require.Empty(t, x.Progs)
	require.NoError(t, ev.restore())
	after, err := getXDP(v.Index)
	require.NoError(t, err)
	require.Equal(t, before.Progs, after.Progs, "same program, same mode")
	require.NoError(t, setXDP(v.Index, -1, -1, unix.XDP_FLAGS_SKB_MODE))
}

func TestVerifierMessageWithoutLog(t *testing.T) {
	require.Nil(t, explainVerifier(nil))
	plain := errors.New("x")
	require.Equal(t, plain, explainVerifier(plain))
	require.False(t, strings.Contains(wrapErr("op", unix.EPERM).Error(), "%!"))
	require.ErrorIs(t, wrapErr("op", unix.EACCES), ErrNotPermitted)
	require.ErrorIs(t, wrapErr("op", unix.EACCES), unix.EACCES)
}

func loadObjs(t *testing.T) *gen.BasicObjects {
	t.Helper()
	testenv.RequireRoot(t)
	var objs gen.BasicObjects
	require.NoError(t, gen.LoadBasicObjects(&objs, nil))
	t.Cleanup(func() { objs.Close() })
	return &objs
}

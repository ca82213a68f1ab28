package loader_test

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// tcxPrograms lists the tcx programs on one hook of ifindex.
func tcxPrograms(t *testing.T, ifindex int, at ebpf.AttachType) int {
	t.Helper()
	res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: at})
	require.NoError(t, err)
	return len(res.Programs)
}

// TestAttachTC attaches the TC drop baseline to ingress, checks that it
// sees and drops the peer's traffic, and that Close takes it off again
// (twice is fine); egress attaches and detaches the same way.
func TestAttachTC(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	objs := loadBasic(t, gen.BasicVerdictVERDICT_DROP)

	a, err := loader.AttachTC(objs.TcDrop, loader.TCOptions{Interface: v.Name})
	require.NoError(t, err)
	require.Equal(t, v.Name, a.Interface())
	require.Equal(t, v.Index, a.Ifindex())
	require.False(t, a.Egress())
	require.Equal(t, 1, tcxPrograms(t, v.Index, ebpf.AttachTCXIngress))
	waitCounted(t, v, objs, gen.BasicVerdictVERDICT_DROP)
	require.NoError(t, a.Close())
	require.NoError(t, a.Close())
	require.Equal(t, 0, tcxPrograms(t, v.Index, ebpf.AttachTCXIngress))

	e, err := loader.AttachTC(objs.TcDrop, loader.TCOptions{Interface: v.Name, Egress: true})
	require.NoError(t, err)
	require.True(t, e.Egress())
	require.Equal(t, 1, tcxPrograms(t, v.Index, ebpf.AttachTCXEgress))
	require.Equal(t, 0, tcxPrograms(t, v.Index, ebpf.AttachTCXIngress))
	require.NoError(t, e.Close())
	require.Equal(t, 0, tcxPrograms(t, v.Index, ebpf.AttachTCXEgress))
}

func TestAttachTCBadArguments(t *testing.T) {
	objs := loadBasic(t, gen.BasicVerdictVERDICT_DROP)
	_, err := loader.AttachTC(nil, loader.TCOptions{Interface: "lo"})
	require.ErrorContains(t, err, "nil program")
	_, err = loader.AttachTC(objs.XdpDrop, loader.TCOptions{Interface: "lo"})
	require.ErrorContains(t, err, "want SchedCLS")
	_, err = loader.AttachTC(objs.TcDrop, loader.TCOptions{Interface: "xdpnosuch0"})
	require.ErrorIs(t, err, loader.ErrNoInterface)
	require.ErrorContains(t, err, "xdpnosuch0")
}

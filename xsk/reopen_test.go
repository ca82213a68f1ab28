package xsk

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// TestOpenRedirect reopens a loaded redirect program from its program
// alone, as `xdpdrop stats` does for a redirect another process runs, and
// reads the same per-queue counters.
func TestOpenRedirect(t *testing.T) {
	testenv.RequireRoot(t)
	r, err := NewRedirect(RedirectOptions{Queues: []int{0}})
	require.NoError(t, err)
	defer r.Close()
	f := frames.UDP4("198.18.0.2", "198.18.0.1", 1024, 53, 18)
	type xdpMD struct{ Data, DataEnd, DataMeta, Ifindex, RxQueue, Egress uint32 }
	ctx := xdpMD{DataEnd: uint32(len(f.Bytes)), RxQueue: 0}
	ret, err := r.Program().Run(&ebpf.RunOptions{Data: f.Bytes, Context: &ctx, Repeat: 5})
	require.NoError(t, err)
	require.Equal(t, uint32(2), ret, "XDP_PASS: no socket on queue 0")

	o, err := OpenRedirect(r.Program())
	require.NoError(t, err)
	defer o.Close()
	got, err := o.Counters()
	require.NoError(t, err)
	require.Equal(t, uint64(5), got[0].Passed.Packets)

	var objs gen.BasicObjects
	require.NoError(t, gen.LoadBasicObjects(&objs, nil))
	defer objs.Close()
	_, err = OpenRedirect(objs.XdpDrop)
	require.ErrorIs(t, err, ErrNotRedirect)
}

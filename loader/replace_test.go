package loader_test

import (
	"encoding/binary"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// receiver collects the sequence numbers of the flow's datagrams that
// reach the host's socket, i.e. that XDP let through.
type receiver struct {
	conn *net.UDPConn
	mu   sync.Mutex
	seqs []uint64
	done chan struct{}
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(198, 18, 0, 1), Port: flowPort})
	require.NoError(t, err)
	require.NoError(t, c.SetReadBuffer(8<<20))
	r := &receiver{conn: c, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		buf := make([]byte, 2048)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if n >= 8 {
				r.mu.Lock()
				r.seqs = append(r.seqs, binary.BigEndian.Uint64(buf))
				r.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { c.Close(); <-r.done })
	return r
}

// waitPast waits until a datagram with sequence number > seq arrived.
func (r *receiver) waitPast(t *testing.T, seq uint64) {
	t.Helper()
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.seqs) > 0 && r.seqs[len(r.seqs)-1] > seq
	}, 10e9, 1e5, "no datagram after #%d reached the host", seq)
}

// between returns the received sequence numbers in (lo, hi].
func (r *receiver) between(lo, hi uint64) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	for _, s := range r.seqs {
		if s > lo && s <= hi {
			out = append(out, s)
		}
	}
	return out
}

// TestReplaceUnderTraffic replaces the attached program 100 times while the
// peer sends a UDP flow to the host, alternating two programs that both drop
// it (xdp_drop and xdp_count returning XDP_DROP), and checks that not one
// datagram sent after the first attach and before the last replacement
// reached the host's socket: there was never a moment without a program.
// The flow's datagrams carry sequence numbers; a final replacement with
// xdp_pass lets later ones through, and their arrival proves (the path is
// FIFO) that every earlier one was judged.
func TestReplaceUnderTraffic(t *testing.T) {
	const replacements = 100
	for _, nl := range []bool{false, true} {
		name := loader.MethodLink.String()
		if nl {
			name = loader.MethodNetlink.String()
		}
		t.Run(name, func(t *testing.T) {
			v := testenv.NewVeth(t, testenv.VethOptions{})
			objs := loadBasic(t, gen.BasicVerdictVERDICT_DROP)
			r := startReceiver(t)
			f := startFlow(t, v)

			// Without XDP the flow reaches the host.
			r.waitPast(t, 0)

			a, err := loader.Attach(objs.XdpCount, loader.Options{Interface: v.Name, Mode: loader.ModeDriver, Netlink: nl})
			require.NoError(t, err)
			t.Cleanup(func() { a.Close() })
			first := f.sent.Load()

			progs := []*ebpf.Program{objs.XdpDrop, objs.XdpCount}
			var countedBefore uint64
			for i := range replacements {
				if i == replacements/2 {
					countedBefore = counted(t, objs.Verdicts, gen.BasicVerdictVERDICT_DROP)
				}
				require.NoError(t, a.Replace(progs[i%2]))
				f.waitSent(t, 200)
			}
			last := f.sent.Load()
			// Let the datagrams up to last reach XDP (a sent datagram
			// may still be on its way on a busy machine) before the
			// program that passes them goes in.
			f.waitSent(t, 200)
			require.NoError(t, a.Replace(objs.XdpPass))
			r.waitPast(t, last+1)
			f.close()

			leaked := r.between(first, last)
			require.Empty(t, leaked, "%d of the datagrams #%d..#%d got through during %d replacements", len(leaked), first+1, last, replacements)
			require.Greater(t, counted(t, objs.Verdicts, gen.BasicVerdictVERDICT_DROP), countedBefore,
				"xdp_count saw the flow between replacements")
			t.Logf("%d datagrams dropped across %d replacements, none leaked", last-first, replacements)

			st := statusOf(t, v.Name, "")
			require.Len(t, st.Programs, 1)
			require.Equal(t, "xdp_pass", st.Programs[0].Name)
			require.True(t, st.Programs[0].Ours, "a replaced program is still ours")
			require.NotZero(t, st.Programs[0].Meta.ReplacedAt)
			require.NoError(t, a.Close())
			requireClean(t, v.Name, "")
		})
	}
}

// TestReplacePinned: Replace on a pinned attachment re-pins the new program
// and keeps the configuration; ReplaceConfig changes it; a later Open sees
// both.
func TestReplacePinned(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	root := testenv.TempPinDir(t)
	objs := loadBasic(t, gen.BasicVerdictVERDICT_DROP)
	a, err := loader.Attach(objs.XdpDrop, loader.Options{Interface: v.Name, Pin: true, PinRoot: root, Config: map[string]string{"v": "1"}})
	require.NoError(t, err)
	require.NoError(t, a.Replace(objs.XdpCount))
	require.NoError(t, a.Close())

	b, err := loader.Open(v.Name, root)
	require.NoError(t, err)
	info, err := b.Program().Info()
	require.NoError(t, err)
	require.Equal(t, "xdp_count", info.Name)
	require.Equal(t, "1", b.Meta().Config["v"])
	require.NoError(t, b.ReplaceConfig(objs.XdpPass, map[string]string{"v": "2"}))
	require.NoError(t, b.Close())

	st := statusOf(t, v.Name, root)
	require.Len(t, st.Programs, 1)
	require.Equal(t, "xdp_pass", st.Programs[0].Name)
	require.True(t, st.Programs[0].Pinned)
	require.Equal(t, "2", st.Programs[0].Meta.Config["v"])

	c, err := loader.Open(v.Name, root)
	require.NoError(t, err)
	require.Equal(t, "2", c.Meta().Config["v"])
	require.Error(t, c.Replace(nil))
	require.NoError(t, c.Detach())
	requireClean(t, v.Name, root)
	require.Error(t, c.Replace(objs.XdpDrop), "replace after detach")
}

// TestReplaceWithMaps swaps in a program that brings its own maps: the pins
// under MapsDir follow (a map it lacks loses its pin), and so does the
// recorded list of maps a later process finds.
func TestReplaceWithMaps(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	root := testenv.TempPinDir(t)
	first := loadBasic(t, gen.BasicVerdictVERDICT_DROP)
	second := loadBasic(t, gen.BasicVerdictVERDICT_DROP)
	a, err := loader.Attach(first.XdpCount, loader.Options{Interface: v.Name, Pin: true, PinRoot: root,
		Maps: map[string]*ebpf.Map{"verdicts": first.Verdicts, "old": first.Verdicts}})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })

	require.NoError(t, a.ReplaceWithMaps(second.XdpCount, map[string]*ebpf.Map{"verdicts": second.Verdicts, "new": second.Verdicts}))
	idOf := func(m *ebpf.Map) ebpf.MapID {
		info, err := m.Info()
		require.NoError(t, err)
		id, ok := info.ID()
		require.True(t, ok)
		return id
	}
	pinned, err := ebpf.LoadPinnedMap(filepath.Join(a.MapsDir(), "verdicts"), nil)
	require.NoError(t, err)
	defer pinned.Close()
	require.Equal(t, idOf(second.Verdicts), idOf(pinned), "the pin is the new map")
	require.FileExists(t, filepath.Join(a.MapsDir(), "new"))
	require.NoFileExists(t, filepath.Join(a.MapsDir(), "old"))
	require.Equal(t, idOf(second.Verdicts), idOf(a.Map("verdicts")))
	require.NoError(t, a.Close())

	b, err := loader.Open(v.Name, root)
	require.NoError(t, err)
	require.Equal(t, []string{"new", "verdicts"}, b.Meta().Maps)
	require.Equal(t, idOf(second.Verdicts), idOf(b.Map("verdicts")))
	info, err := b.Program().Info()
	require.NoError(t, err)
	progID, _ := info.ID()
	want, err := second.XdpCount.Info()
	require.NoError(t, err)
	wantID, _ := want.ID()
	require.Equal(t, wantID, progID, "the new program runs and is pinned")
	require.NoError(t, b.Detach())
	requireClean(t, v.Name, root)
}

// TestRunningFollowsReplace: Running, which a foreground command polls
// every second and which remembers its program's ID, reports true after
// the attachment's own Replace (the ID it remembers follows the new
// program) and false once another process put a different program there.
func TestRunningFollowsReplace(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	root := testenv.TempPinDir(t)
	objs := loadBasic(t, gen.BasicVerdictVERDICT_DROP)
	a, err := loader.Attach(objs.XdpDrop, loader.Options{Interface: v.Name, Pin: true, PinRoot: root})
	require.NoError(t, err)
	for range 2 {
		ok, err := a.Running()
		require.NoError(t, err)
		require.True(t, ok, "just attached")
	}
	require.NoError(t, a.Replace(objs.XdpCount))
	ok, err := a.Running()
	require.NoError(t, err)
	require.True(t, ok, "after its own Replace")

	b, err := loader.Open(v.Name, root)
	require.NoError(t, err)
	require.NoError(t, b.Replace(objs.XdpPass))
	ok, err = a.Running()
	require.NoError(t, err)
	require.False(t, ok, "another handle replaced the program")
	ok, err = b.Running()
	require.NoError(t, err)
	require.True(t, ok, "the handle that replaced it")
	require.NoError(t, a.Close())
	require.NoError(t, b.Detach())
	requireClean(t, v.Name, root)
}

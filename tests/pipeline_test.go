package tests

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/pktgen"
)

// udp4 is a 64-byte Ethernet/IPv4/UDP frame 198.18.0.2:1024 -> 198.18.0.1:9
// with valid checksums, built by hand so this test depends on nothing but
// the pipeline it proves.
var udp4 = []byte{
	0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // Ethernet
	0x45, 0x00, 0x00, 0x32, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, // IPv4 ...
	198, 18, 0, 2, 198, 18, 0, 1,
	0x04, 0x00, 0x00, 0x09, 0x00, 0x1e, 0x00, 0x00, // UDP, checksum 0 (none)
	'x', 'd', 'p', 'd', 'r', 'o', 'p', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
}

func init() {
	// IPv4 header checksum.
	var sum uint32
	for i := 14; i < 34; i += 2 {
		sum += uint32(udp4[i])<<8 | uint32(udp4[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	c := ^uint16(sum)
	udp4[24], udp4[25] = byte(c>>8), byte(c)
}

func loadCount(t *testing.T, verdict gen.BasicVerdict) *gen.BasicObjects {
	t.Helper()
	testenv.RequireRoot(t)
	spec, err := gen.LoadBasic()
	require.NoError(t, err)
	require.NoError(t, spec.Variables[gen.BasicVarCountVerdict].Set(uint32(verdict)))
	var objs gen.BasicObjects
	require.NoError(t, spec.LoadAndAssign(&objs, nil))
	t.Cleanup(func() { require.NoError(t, objs.Close()) })
	return &objs
}

// sumVerdict adds up one slot of the per-CPU verdict counters.
func sumVerdict(t *testing.T, m *ebpf.Map, v gen.BasicVerdict) gen.BasicCounter {
	t.Helper()
	var per []gen.BasicCounter
	require.NoError(t, m.Lookup(uint32(v), &per))
	var total gen.BasicCounter
	for _, c := range per {
		total.Packets += c.Packets
		total.Bytes += c.Bytes
	}
	return total
}

// TestPipelineTestRun proves the clang -> bpf2go -> Go pipeline: the
// committed object loads, runs in the kernel, returns the verdict it was
// configured with through a volatile const, and counts per CPU.
func TestPipelineTestRun(t *testing.T) {
	for _, v := range []gen.BasicVerdict{gen.BasicVerdictVERDICT_DROP, gen.BasicVerdictVERDICT_PASS} {
		objs := loadCount(t, v)
		ret, err := objs.XdpCount.Run(&ebpf.RunOptions{Data: udp4, Repeat: 1000})
		require.NoError(t, err)
		require.Equal(t, uint32(v), ret, "verdict")
		got := sumVerdict(t, objs.Verdicts, v)
		require.Equal(t, uint64(1000), got.Packets, "packets counted")
		require.Equal(t, uint64(1000*len(udp4)), got.Bytes, "bytes counted")
		other := sumVerdict(t, objs.Verdicts, gen.BasicVerdictVERDICT_ABORTED)
		require.Zero(t, other.Packets)
	}
}

// TestGeneratorDeliversEveryFrame sends frames with the live-frames
// generator from the peer end and counts them with a native XDP program at
// the host end: every frame sent must be counted once, or be one that veth
// itself refused because the host end's ring was full (its
// tx_queue_N_xdp_xmit_errors counters): that happens when the receiving
// CPU is busy with something else, as when other tests run beside this one.
func TestGeneratorDeliversEveryFrame(t *testing.T) {
	objs := loadCount(t, gen.BasicVerdictVERDICT_DROP)
	veth := testenv.NewVeth(t, testenv.VethOptions{})
	l, err := link.AttachXDP(link.XDPOptions{Program: objs.XdpCount, Interface: veth.Index, Flags: link.XDPDriverMode})
	require.NoError(t, err)
	defer l.Close()

	g, err := pktgen.New(pktgen.Options{Flows: 256})
	require.NoError(t, err)
	defer g.Close()
	const n = 100_000
	require.NoError(t, veth.InPeerNS(func() error {
		_, err := g.Send(veth.PeerIndex, udp4, n, 64)
		return err
	}))
	// The peer's own kernel stack may send a few frames of its own (IPv6
	// router solicitations, MLD reports) while the test runs; the counter
	// sees those too, so allow a handful on top of what was sent.
	got := sumVerdict(t, objs.Verdicts, gen.BasicVerdictVERDICT_DROP)
	full := xmitErrors(t, veth)
	t.Logf("%d counted, %d refused by veth for a full ring", got.Packets, full)
	require.GreaterOrEqual(t, got.Packets+full, uint64(n), "every frame sent must be counted at the host end, or refused for a full ring")
	require.LessOrEqual(t, got.Packets+full, uint64(n+16), "no frame may be counted twice")
	require.Greater(t, got.Packets, uint64(n/2), "most frames arrive")
	require.GreaterOrEqual(t, got.Bytes, got.Packets*uint64(len(udp4)))
}

// xmitErrors sums the peer's tx_queue_N_xdp_xmit_errors (`ethtool -S`):
// frames the peer's XDP_TX could not put into the host end's rings.
func xmitErrors(t *testing.T, v *testenv.Veth) uint64 {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", v.NSName, "ethtool", "-S", v.PeerName).CombinedOutput()
	require.NoError(t, err, "ethtool -S %s: %s", v.PeerName, out)
	var sum uint64
	for _, line := range strings.Split(string(out), "\n") {
		k, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && strings.HasPrefix(k, "tx_queue_") && strings.HasSuffix(k, "_xdp_xmit_errors") {
			n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
			require.NoError(t, err, line)
			sum += n
		}
	}
	return sum
}

// TestTCDropCounts runs the TC baseline in the kernel: it must shoot the
// skb and count it under the drop verdict.
func TestTCDropCounts(t *testing.T) {
	objs := loadCount(t, gen.BasicVerdictVERDICT_DROP)
	ret, err := objs.TcDrop.Run(&ebpf.RunOptions{Data: udp4, Repeat: 10})
	require.NoError(t, err)
	require.Equal(t, uint32(2), ret, "TC_ACT_SHOT")
	got := sumVerdict(t, objs.Verdicts, gen.BasicVerdictVERDICT_DROP)
	require.Equal(t, uint64(10), got.Packets)
}

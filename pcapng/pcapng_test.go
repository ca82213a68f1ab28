package pcapng_test

import (
	"bytes"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/pcapng"
)

var t0 = time.Date(2025, 3, 1, 12, 30, 45, 123456789, time.UTC)

// sample writes two packets on one interface (one cut by the snap length),
// with comments, queue and XDP verdict.
func sample(t *testing.T) ([]byte, [][]byte) {
	t.Helper()
	a := frames.UDP4("198.51.100.7", "192.0.2.9", 4000, 11211, 18).Bytes
	b := frames.TCP6("2001:db8::1", "2001:db8::2", 5000, 443, 200).Bytes
	var out bytes.Buffer
	w, err := pcapng.NewWriter(&out, pcapng.WriterOptions{App: "xdpdrop test"})
	require.NoError(t, err)
	id, err := w.AddInterface(pcapng.Interface{Name: "veth-test", LinkType: pcapng.LinkEthernet, Snaplen: 128})
	require.NoError(t, err)
	require.NoError(t, w.WritePacket(pcapng.Packet{Interface: id, Time: t0, Length: len(a), Data: a,
		Comments: []string{"verdict drop, rule 2: drop udp dport 11211"}, HasQueue: true, Queue: 3,
		Verdicts: [][]byte{pcapng.XDPVerdict(1)}}))
	require.NoError(t, w.WritePacket(pcapng.Packet{Interface: id, Time: t0.Add(time.Millisecond), Data: b}))
	require.Error(t, w.WritePacket(pcapng.Packet{Interface: 1, Data: a}), "undescribed interface")
	require.NoError(t, w.Flush())
	return out.Bytes(), [][]byte{a, b}
}

// TestRoundTrip: our reader gets back every field and option.
func TestRoundTrip(t *testing.T) {
	file, fs := sample(t)
	r, err := pcapng.NewReader(bytes.NewReader(file))
	require.NoError(t, err)
	p, err := r.Next()
	require.NoError(t, err)
	require.Equal(t, []pcapng.Interface{{Name: "veth-test", LinkType: 1, Snaplen: 128, TsResol: 9}}, r.Interfaces())
	require.Equal(t, fs[0], p.Data)
	require.Equal(t, len(fs[0]), p.Length)
	require.True(t, p.Time.Equal(t0), "%v", p.Time)
	require.Equal(t, []string{"verdict drop, rule 2: drop udp dport 11211"}, p.Comments)
	require.True(t, p.HasQueue)
	require.Equal(t, uint32(3), p.Queue)
	require.Len(t, p.Verdicts, 1)
	a, ok := pcapng.XDPAction(p.Verdicts[0])
	require.True(t, ok)
	require.Equal(t, uint64(1), a)

	p, err = r.Next()
	require.NoError(t, err)
	require.Equal(t, fs[1][:128], p.Data, "cut to the snap length")
	require.Equal(t, len(fs[1]), p.Length)
	require.Empty(t, p.Comments)
	require.False(t, p.HasQueue)
	_, err = r.Next()
	require.ErrorIs(t, err, io.EOF)
}

// TestReadByGopacket: another implementation reads the same packets.
func TestReadByGopacket(t *testing.T) {
	file, fs := sample(t)
	r, err := pcapgo.NewNgReader(bytes.NewReader(file), pcapgo.DefaultNgReaderOptions)
	require.NoError(t, err)
	data, ci, err := r.ReadPacketData()
	require.NoError(t, err)
	require.Equal(t, fs[0], data)
	require.True(t, ci.Timestamp.Equal(t0), "%v", ci.Timestamp)
	data, ci, err = r.ReadPacketData()
	require.NoError(t, err)
	require.Equal(t, fs[1][:128], data)
	require.Equal(t, len(fs[1]), ci.Length)
}

// TestBadInput: damaged files are errors, never panics.
func TestBadInput(t *testing.T) {
	file, _ := sample(t)
	for name, b := range map[string][]byte{
		"empty":     nil,
		"pcap":      {0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"cut":       file[:len(file)-10],
		"bad magic": append(append([]byte{}, file[:8]...), 1, 2, 3, 4),
	} {
		r, err := pcapng.NewReader(bytes.NewReader(b))
		if err == nil {
			for err == nil {
				_, err = r.Next()
			}
		}
		require.ErrorIs(t, err, pcapng.ErrFormat, name)
	}
}

// tcpdumpPath finds Debian's tcpdump (installed by .ci/run).
func tcpdumpPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("tcpdump")
	if err != nil {
		testenv.SkipOrFail(t, "needs tcpdump (Debian package tcpdump) to read the files back")
	}
	return p
}

// TestTcpdumpReads: tcpdump reads the file, from a path and from a pipe,
// and prints both packets with their addresses, ports and bytes.
func TestTcpdumpReads(t *testing.T) {
	td := tcpdumpPath(t)
	file, fs := sample(t)
	path := filepath.Join(t.TempDir(), "x.pcapng")
	require.NoError(t, os.WriteFile(path, file, 0o600))
	for _, from := range []string{path, "-"} {
		cmd := exec.Command(td, "-r", from, "-nn", "-tt", "-xx")
		cmd.Stdin = bytes.NewReader(file)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		s := string(out)
		require.Contains(t, s, "1740832245.123456 IP 198.51.100.7.4000 > 192.0.2.9.11211: UDP, length 18")
		require.Contains(t, s, "2001:db8::1.5000 > 2001:db8::2.443: Flags [S]")
		require.Contains(t, testenv.TcpdumpHex(s), hex.EncodeToString(fs[0]), "byte for byte")
		require.Contains(t, testenv.TcpdumpHex(s), hex.EncodeToString(fs[1][:128]))
	}
}

package tests

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// jumboSandbox is sandboxForCLI with MTU 9000 on both ends.
func jumboSandbox(t *testing.T) *testenv.Veth {
	t.Helper()
	testenv.RequireBPFFS(t)
	v := testenv.NewVeth(t, testenv.VethOptions{MTU: 9000})
	t.Cleanup(func() { _ = loader.DetachInterface(v.Name, loader.DetachOptions{}) })
	return v
}

// sendRaw sends each frame once from the peer end through an AF_PACKET
// socket, as ordinary skb traffic into the host end.
func sendRaw(t *testing.T, v *testenv.Veth, fs ...[]byte) {
	t.Helper()
	require.NoError(t, v.InPeerNS(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		// sll_protocol is in network byte order: ETH_P_IP.
		var proto [2]byte
		binary.BigEndian.PutUint16(proto[:], unix.ETH_P_IP)
		to := &unix.SockaddrLinklayer{Ifindex: v.PeerIndex, Protocol: binary.NativeEndian.Uint16(proto[:])}
		for _, f := range fs {
			if err := unix.Sendto(fd, f, 0, to); err != nil {
				return err
			}
		}
		return nil
	}))
}

// jumboUDP is a valid 9,000-byte IPv4/UDP frame from the peer to the host.
func jumboUDP(t *testing.T, v *testenv.Veth, dport uint16) []byte {
	f := frames.UDP4("198.18.0.2", "198.18.0.1", 40000, dport, 9000-14-20-8)
	copy(f.Bytes[0:6], v.MAC)
	copy(f.Bytes[6:12], v.PeerMAC)
	require.Len(t, f.Bytes, 9000)
	return f.Bytes
}

// TestCLIJumboDrop: on a veth with MTU 9000, `drop` attaches in driver mode
// (the kernel refuses a program without multi-buffer support there), and
// 9,000-byte frames sent over the veth are judged by their headers and
// counted at their whole length.
func TestCLIJumboDrop(t *testing.T) {
	v := jumboSandbox(t)
	rules := writeRules(t, "policy pass\ndrop udp dport 11211\n")
	r := cli(t, "drop", "--iface", v.Name, "--rules", rules, "--mode", "driver", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var res struct {
		Mode string `json:"mode"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
	require.Equal(t, "driver", res.Mode)

	memcached, dns := jumboUDP(t, v, 11211), jumboUDP(t, v, 53)
	sendRaw(t, v, memcached, memcached, memcached, dns, dns)
	var s jsonStats
	require.Eventually(t, func() bool {
		s = statsJSON(t, v.Name)
		rule, _ := s.rule("drop udp dport 11211")
		return rule.Packets >= 3 && s.verdict("pass") >= 2
	}, 5*time.Second, 50*time.Millisecond)
	rule, ok := s.rule("drop udp dport 11211")
	require.True(t, ok, "rules: %+v", s.Rules)
	require.Equal(t, uint64(3), rule.Packets, "every 9,000-byte frame to 11211 matched its rule")
	require.Equal(t, uint64(3*9000), rule.Bytes, "counted at its whole length, not its first buffer")
	require.Equal(t, uint64(0), s.verdict("malformed"), "no jumbo frame judged malformed")
}

// TestCLIJumboRedirect: `redirect` attaches in driver mode at MTU 9000 and
// runs; its filter judges a jumbo frame by its headers; ordinary frames
// reach its socket, a jumbo frame is dropped by the kernel and counted.
func TestCLIJumboRedirect(t *testing.T) {
	v := jumboSandbox(t)
	filter := writeRules(t, "policy pass\nredirect udp dport 4242\n")
	cmd, errb := startRedirect(t, v, "--queues", "all", "--mode", "driver", "--filter", filter, "--action", "count")
	r := cli(t, "status", "--iface", v.Name, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var st []struct {
		Programs []struct {
			Mode string `json:"mode"`
		} `json:"programs"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	require.Len(t, st, 1)
	require.Len(t, st[0].Programs, 1)
	require.Equal(t, "driver", st[0].Programs[0].Mode)

	small := frames.UDP4("198.18.0.2", "198.18.0.1", 40000, 4242, 18)
	copy(small.Bytes[0:6], v.MAC)
	copy(small.Bytes[6:12], v.PeerMAC)
	sendRaw(t, v, small.Bytes, small.Bytes, jumboUDP(t, v, 4242))
	time.Sleep(1500 * time.Millisecond) // one more sample after the traffic

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, cmd.Wait(), errb.String())
	// The last sample of the one queue.
	var q struct {
		RxFrames   uint64 `json:"rx_frames"`
		Redirected uint64 `json:"redirected"`
		RxDropped  uint64 `json:"rx_dropped"`
	}
	lines := strings.Split(strings.TrimSpace(cmd.Stdout.(fmt.Stringer).String()), "\n")
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &q), lines[len(lines)-1])
	require.Equal(t, uint64(3), q.Redirected, "every frame to 4242 redirected by the program, the jumbo one too")
	require.Equal(t, uint64(2), q.RxFrames, "the small frames reached the socket")
	// A frame longer than the socket's UMEM frame (4,096 bytes): the
	// kernel drops it and counts it (docs/RULES.md, jumbo frames).
	require.Equal(t, uint64(1), q.RxDropped, "the jumbo frame counted as dropped by the socket")
}

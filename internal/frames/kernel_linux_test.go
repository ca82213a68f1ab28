//go:build linux

package frames_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/frames"
)

// TestConstantsMatchKernel compares the package's numbers with those of
// the kernel headers as golang.org/x/sys/unix has them.
func TestConstantsMatchKernel(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"EtherTypeIPv4", int(frames.EtherTypeIPv4), unix.ETH_P_IP},
		{"EtherTypeIPv6", int(frames.EtherTypeIPv6), unix.ETH_P_IPV6},
		{"EtherTypeARP", int(frames.EtherTypeARP), unix.ETH_P_ARP},
		{"EtherTypeLLDP", int(frames.EtherTypeLLDP), unix.ETH_P_LLDP},
		{"TPID8021Q", int(frames.TPID8021Q), unix.ETH_P_8021Q},
		{"TPID8021AD", int(frames.TPID8021AD), unix.ETH_P_8021AD},
		{"ProtoHopByHop", int(frames.ProtoHopByHop), unix.IPPROTO_HOPOPTS},
		{"ProtoICMP", int(frames.ProtoICMP), unix.IPPROTO_ICMP},
		{"ProtoTCP", int(frames.ProtoTCP), unix.IPPROTO_TCP},
		{"ProtoUDP", int(frames.ProtoUDP), unix.IPPROTO_UDP},
		{"ProtoRouting", int(frames.ProtoRouting), unix.IPPROTO_ROUTING},
		{"ProtoFragment", int(frames.ProtoFragment), unix.IPPROTO_FRAGMENT},
		{"ProtoGRE", int(frames.ProtoGRE), unix.IPPROTO_GRE},
		{"ProtoESP", int(frames.ProtoESP), unix.IPPROTO_ESP},
		{"ProtoAH", int(frames.ProtoAH), unix.IPPROTO_AH},
		{"ProtoICMPv6", int(frames.ProtoICMPv6), unix.IPPROTO_ICMPV6},
		{"ProtoNoNext", int(frames.ProtoNoNext), unix.IPPROTO_NONE},
		{"ProtoDestOpts", int(frames.ProtoDestOpts), unix.IPPROTO_DSTOPTS},
		{"ProtoSCTP", int(frames.ProtoSCTP), unix.IPPROTO_SCTP},
	} {
		assert.Equal(t, c.want, c.got, c.name)
	}
}

// loopback sends frames into the kernel's receive path through an
// AF_PACKET socket on lo, in a network namespace of the test's own. Frames
// go to lo's MAC address (all zeros) so the kernel takes them as its own;
// they carry no checksum offload state, so the kernel checks every
// checksum in software.
type loopback struct {
	t       *testing.T
	fd      int
	ifindex int
}

// newLoopback moves the calling test's goroutine, locked to its thread
// for good, into a new network namespace with lo up. Everything the test
// opens afterwards lives there; subtests, which run on other goroutines,
// would not, so the kernel tests use none.
//
// Linux takes 127.0.0.0/8 arriving from a device as martian unless
// route_localnet is set, and a local source address as spoofed unless
// accept_local is set; both are set in the namespace only.
func newLoopback(t *testing.T) *loopback {
	t.Helper()
	runtime.LockOSThread() // never unlocked: the thread ends with the test's goroutine
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		if errors.Is(err, unix.EPERM) {
			testenv.SkipOrFail(t, "a network namespace for injecting frames needs CAP_SYS_ADMIN")
		}
		t.Fatalf("unshare(CLONE_NEWNET): %v", err)
	}

	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err, "socket for ioctl")
	defer unix.Close(sock)
	ifr, err := unix.NewIfreq("lo")
	require.NoError(t, err)
	require.NoError(t, unix.IoctlIfreq(sock, unix.SIOCGIFFLAGS, ifr), "SIOCGIFFLAGS lo")
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	require.NoError(t, unix.IoctlIfreq(sock, unix.SIOCSIFFLAGS, ifr), "SIOCSIFFLAGS lo up")
	for _, name := range []string{"ipv4/conf/lo/route_localnet", "ipv4/conf/lo/accept_local"} {
		require.NoError(t, os.WriteFile("/proc/sys/net/"+name, []byte("1"), 0), "setting %s in the test's namespace", name)
	}
	lo, err := net.InterfaceByName("lo")
	require.NoError(t, err, "lo in the new namespace")

	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if errors.Is(err, unix.EPERM) {
		testenv.SkipOrFail(t, "sending frames into lo needs CAP_NET_RAW (AF_PACKET socket)")
	}
	require.NoError(t, err, "AF_PACKET socket")
	t.Cleanup(func() { unix.Close(fd) })
	return &loopback{t: t, fd: fd, ifindex: lo.Index}
}

func (l *loopback) send(f frames.Frame) {
	l.t.Helper()
	b := bytes.Clone(f.Bytes)
	clear(b[:6]) // lo's own address
	require.NoError(l.t, unix.Sendto(l.fd, b, 0, &unix.SockaddrLinklayer{Ifindex: l.ifindex}), "sending a frame on lo")
}

// capture calls start, then passes every frame seen on lo to see until
// stop returns true or two seconds pass.
func (l *loopback) capture(start func(), see func([]byte), stop func() bool) {
	l.t.Helper()
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	require.NoError(l.t, err, "AF_PACKET capture socket")
	defer unix.Close(fd)
	err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: l.ifindex})
	require.NoError(l.t, err, "binding the capture socket to lo")
	tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
	require.NoError(l.t, unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv), "SO_RCVTIMEO")
	start()
	buf := make([]byte, 1<<16)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && !stop(); {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		require.NoError(l.t, err, "reading the capture socket")
		see(buf[:n])
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// corruptL4 returns f with its L4 checksum wrong.
func corruptL4(f frames.Frame, at int) frames.Frame {
	return f.SetByte(f.L4+at, f.Bytes[f.L4+at]^0x5a)
}

// TestKernelAcceptsUDP has the kernel deliver built UDP datagrams to a
// socket: it checks the IP header, lengths, extension headers and the UDP
// checksum on the way. A copy with a wrong checksum, sent first, must not
// arrive, which shows the checksum is really checked.
func TestKernelAcceptsUDP(t *testing.T) {
	l := newLoopback(t)
	lo4, lo6 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")
	for _, tc := range []struct {
		name string
		spec frames.Spec
	}{
		{"ipv4", frames.Spec{Src: lo4, Dst: lo4}},
		{"ipv4 options DF", frames.Spec{Src: lo4, Dst: lo4, IPv4Options: []byte{1, 148, 4, 0, 0}, IPv4DontFragment: true}},
		{"ipv4 padded", frames.Spec{Src: lo4, Dst: lo4, PadTo: 128}},
		{"ipv6", frames.Spec{Src: lo6, Dst: lo6}},
		{"ipv6 extension headers", frames.Spec{Src: lo6, Dst: lo6, IPv6Ext: []frames.ExtHeader{
			{Type: frames.ProtoHopByHop, Len: 16},
			{Type: frames.ProtoDestOpts},
			{Type: frames.ProtoRouting, Len: 24},
			{Type: frames.ProtoFragment, ID: 7}, // atomic fragment
			{Type: frames.ProtoDestOpts, Len: 2048},
		}}},
		{"ipv6 padded", frames.Spec{Src: lo6, Dst: lo6, PadTo: 200}},
	} {
		network := "udp4"
		if tc.spec.Src.Is6() {
			network = "udp6"
		}
		conn, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(tc.spec.Dst, 0)))
		require.NoError(t, err, tc.name)

		s := tc.spec
		s.Proto = frames.ProtoUDP
		s.SrcPort = 9
		s.DstPort = uint16(conn.LocalAddr().(*net.UDPAddr).Port)
		s.Payload = []byte("bad checksum")
		l.send(corruptL4(s.Build(), 6))
		s.Payload = []byte("good, odd length")
		good := s.Build()
		mustVerify(t, s, good)
		l.send(good)

		buf := make([]byte, 2048)
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := conn.Read(buf)
		if assert.NoError(t, err, "%s: the kernel did not deliver the datagram", tc.name) {
			assert.Equal(t, "good, odd length", string(buf[:n]), "%s: delivered payload", tc.name)
			conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			n, err = conn.Read(buf)
			assert.Error(t, err, "%s: the kernel also delivered %q", tc.name, buf[:n])
		}
		conn.Close()
	}
}

// TestKernelAnswersTCPAndICMP sends a TCP SYN to a listening socket and ICMP
// and ICMPv6 echo requests, and waits for the kernel's answer, which it
// only gives if the checksum verifies. A copy with a wrong checksum must
// go unanswered.
func TestKernelAnswersTCPAndICMP(t *testing.T) {
	l := newLoopback(t)
	for _, host := range []string{"127.0.0.1", "::1"} {
		addr := netip.MustParseAddr(host)

		ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
		require.NoError(t, err, "listening on %v", addr)
		port := uint16(ln.Addr().(*net.TCPAddr).Port)
		s := frames.Spec{Src: addr, Dst: addr, Proto: frames.ProtoTCP, DstPort: port,
			TCPOptions: []byte{2, 4, 0x05, 0xb4}}
		bad, good := s, s
		bad.SrcPort, good.SrcPort = 40001, 40002
		if addr.Is6() {
			good.IPv6Ext = []frames.ExtHeader{{Type: frames.ProtoDestOpts}}
		}
		synAck := func(b []byte, to uint16) bool {
			tcp := l4Of(b, frames.ProtoTCP)
			return len(tcp) >= 20 && binary.BigEndian.Uint16(tcp) == port &&
				binary.BigEndian.Uint16(tcp[2:]) == to && tcp[13]&0x12 == 0x12
		}
		expectAnswer(t, "TCP SYN to "+host, l, corruptL4(bad.Build(), 16), good.Build(),
			func(b []byte) bool { return synAck(b, bad.SrcPort) },
			func(b []byte) bool { return synAck(b, good.SrcPort) })
		ln.Close()

		s = frames.Spec{Src: addr, Dst: addr, Proto: frames.ProtoICMP, ICMPType: 8}
		reply := uint8(0)
		if addr.Is6() {
			s.Proto, s.ICMPType, reply = frames.ProtoICMPv6, 128, 129
		}
		bad, good = s, s
		bad.Payload, good.Payload = []byte("frames bad"), []byte("frames good!")
		echoReply := func(b []byte, payload []byte) bool {
			icmp := l4Of(b, s.Proto)
			return len(icmp) >= 8 && icmp[0] == reply && bytes.Equal(icmp[8:], payload)
		}
		expectAnswer(t, "echo request to "+host, l, corruptL4(bad.Build(), 2), good.Build(),
			func(b []byte) bool { return echoReply(b, bad.Payload) },
			func(b []byte) bool { return echoReply(b, good.Payload) })
	}
}

// expectAnswer sends bad then good, and checks that the kernel answers good
// and, for a while longer, still not bad.
func expectAnswer(t *testing.T, name string, l *loopback, bad, good frames.Frame, answersBad, answersGood func([]byte) bool) {
	t.Helper()
	var sawBad bool
	var sawGood time.Time
	l.capture(
		func() { l.send(bad); l.send(good) },
		func(b []byte) {
			sawBad = sawBad || answersBad(b)
			if sawGood.IsZero() && answersGood(b) {
				sawGood = time.Now()
			}
		},
		func() bool { return !sawGood.IsZero() && time.Since(sawGood) > 200*time.Millisecond },
	)
	assert.False(t, sawGood.IsZero(), "%s: the kernel did not answer the frame", name)
	assert.False(t, sawBad, "%s: the kernel answered the frame with a wrong checksum", name)
}

// l4Of returns what follows the IP header of a frame the kernel sent on
// lo (no VLAN tags, no IPv6 extension headers) if it carries proto.
func l4Of(b []byte, proto uint8) []byte {
	if len(b) < 14 {
		return nil
	}
	switch binary.BigEndian.Uint16(b[12:]) {
	case frames.EtherTypeIPv4:
		if len(b) < 34 || b[23] != proto || 14+int(b[14]&0xf)*4 > len(b) {
			return nil
		}
		return b[14+int(b[14]&0xf)*4:]
	case frames.EtherTypeIPv6:
		if len(b) < 54 || b[20] != proto {
			return nil
		}
		return b[54:]
	}
	return nil
}

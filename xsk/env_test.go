package xsk_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/pktgen"
	"github.com/xdpdrop/xdpdrop/xsk"
)

// env is a veth pair with the redirect program attached natively to the
// host end, where the sockets under test bind; traffic comes from the peer.
type env struct {
	veth *testenv.Veth
	red  *xsk.Redirect
	gen  *pktgen.Generator
}

func newEnv(t testing.TB, queues int, ropts xsk.RedirectOptions) *env {
	t.Helper()
	if runtime.NumCPU() < 2 {
		testenv.SkipOrFail(t, "needs 2 CPUs to steer frames to two veth queues (have %d)", runtime.NumCPU())
	}
	v := testenv.NewVeth(t, testenv.VethOptions{Queues: queues})
	// The peer's IPv6 stack sends neighbour discovery and MLD frames of its
	// own into the host end; without them every counter is exact. Disabling
	// IPv6 itself makes it send a last MLD report or so (seen in about 1
	// of 15 pairs), so it is done before the program that counts frames is
	// attached: that frame is gone by then.
	if err := v.InPeerNS(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/"+v.PeerName+"/disable_ipv6", []byte("1"), 0)
	}); err != nil {
		t.Fatalf("disable IPv6 on the peer: %v", err)
	}
	red, err := xsk.NewRedirect(ropts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := red.Close(); err != nil {
			t.Error(err)
		}
	})
	l, err := link.AttachXDP(link.XDPOptions{Program: red.Program(), Interface: v.Index, Flags: link.XDPDriverMode})
	if err != nil {
		t.Fatalf("attach redirect program to %s: %v", v.Name, err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	e := &env{veth: v, red: red}
	if err := v.InPeerNS(func() error {
		g, err := pktgen.New(pktgen.Options{})
		e.gen = g
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.gen.Close() })
	return e
}

// send transmits each frame count times from the peer into the host end,
// on a thread pinned to cpu: veth hands frames that arrive by XDP_TX to rx
// queue (sending CPU mod queue count), so cpu picks the queue.
func (e *env) send(t testing.TB, cpu int, count uint32, fs ...[]byte) {
	t.Helper()
	if err := e.sendErr(cpu, count, fs...); err != nil {
		t.Fatal(err)
	}
}

// sendAsync is send on another goroutine; the result arrives on the channel.
func (e *env) sendAsync(cpu int, count uint32, fs ...[]byte) <-chan error {
	c := make(chan error, 1)
	go func() { c <- e.sendErr(cpu, count, fs...) }()
	return c
}

func (e *env) sendErr(cpu int, count uint32, fs ...[]byte) error {
	return e.veth.InPeerNS(func() error {
		var old unix.CPUSet
		if err := unix.SchedGetaffinity(0, &old); err != nil {
			return err
		}
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("pin to CPU %d: %w", cpu, err)
		}
		defer unix.SchedSetaffinity(0, &old)
		for _, f := range fs {
			if _, err := e.gen.Send(e.veth.PeerIndex, f, count, 0); err != nil {
				return err
			}
		}
		return nil
	})
}

// open opens a socket on the host end.
func (e *env) open(t testing.TB, opts xsk.Options) *xsk.Socket {
	t.Helper()
	opts.Ifindex = e.veth.Index
	s, err := xsk.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := e.red.Register(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// udp builds a UDP frame from the peer to the host end with a payload of
// size bytes that starts with id, so that every id makes a distinct frame.
func (e *env) udp(sport, dport uint16, id int, size int) []byte {
	payload := frames.Pattern(size)
	for i := 0; i < 4 && i < size; i++ {
		payload[i] = byte(id >> (24 - 8*i))
	}
	spec := frames.Spec{
		Src: netip.MustParseAddr("198.18.0.2"), Dst: netip.MustParseAddr("198.18.0.1"),
		Proto: frames.ProtoUDP, SrcPort: sport, DstPort: dport, Payload: payload,
	}
	copy(spec.DstMAC[:], e.veth.MAC)
	copy(spec.SrcMAC[:], e.veth.PeerMAC)
	return spec.Build().Bytes
}

// ours tells the test's frames (IPv4 from the peer's address) from what
// the peer's stack sends by itself (IPv6 neighbour discovery and such).
func ours(b []byte) bool {
	return len(b) >= 34 && b[12] == 0x08 && b[13] == 0x00 && bytes.Equal(b[26:30], []byte{198, 18, 0, 2})
}

// receive collects frames from s until want have arrived or the deadline
// passes, copying them out and releasing them.
func receive(t testing.TB, s *xsk.Socket, want int, timeout time.Duration) [][]byte {
	t.Helper()
	var got [][]byte
	buf := make([]xsk.Frame, 64)
	deadline := time.Now().Add(timeout)
	for len(got) < want && time.Now().Before(deadline) {
		n, err := s.Receive(buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			if err := s.Wait(10 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for _, f := range buf[:n] {
			if ours(f.Data) {
				got = append(got, append([]byte(nil), f.Data...))
			}
		}
		if err := s.Release(buf[:n]); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// genEnv carries the generator's job to a child copy of the test binary:
// "netns-name ifindex cpu hex-frame". A separate process keeps the
// generator's 10ms-long system calls out of the consumer's Go scheduler.
const genEnv = "XSK_TEST_GENERATOR"

func TestMain(m *testing.M) {
	if job := os.Getenv(genEnv); job != "" {
		if err := runGenerator(job); err != nil {
			fmt.Fprintln(os.Stderr, "generator:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runGenerator sends until its parent closes stdin (or dies).
func runGenerator(job string) error {
	var ns string
	var ifindex, cpu int
	var hexFrame string
	if _, err := fmt.Sscan(job, &ns, &ifindex, &cpu, &hexFrame); err != nil {
		return fmt.Errorf("parse job %q: %w", job, err)
	}
	frame, err := hex.DecodeString(hexFrame)
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	h, err := netns.GetFromName(ns)
	if err != nil {
		return err
	}
	if err := netns.Set(h); err != nil {
		return err
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return err
	}
	g, err := pktgen.New(pktgen.Options{})
	if err != nil {
		return err
	}
	defer g.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, os.Stdin) // returns when the parent closes the pipe
		cancel()
	}()
	_, err = g.Run(ctx, ifindex, frame, pktgen.RunOptions{Batch: 256})
	return err
}

// generate starts a generator process sending frame from the peer on cpu,
// until the returned stop function is called.
func (e *env) generate(tb testing.TB, cpu int, frame []byte) (stop func()) {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %x", genEnv, e.veth.NSName, e.veth.PeerIndex, cpu, frame))
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	return func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			tb.Errorf("generator: %v: %s", err, stderr.String())
		}
	}
}

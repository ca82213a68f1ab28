package xsk_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/xsk"
)

// sendDistinct sends n frames, each once and each different (an id in the
// payload), half from each CPU, so half land on queue 0 and half on queue 1.
func sendDistinct(t *testing.T, e *env, n, size int) [][]byte {
	t.Helper()
	var sent [][]byte
	for cpu := range 2 {
		var batch [][]byte
		for i := range n / 2 {
			id := cpu*n + i
			batch = append(batch, e.udp(uint16(1000+i%50), 2000, id, size))
		}
		e.send(t, cpu, 1, batch...)
		sent = append(sent, batch...)
	}
	return sent
}

func sortFrames(fs [][]byte) {
	slices.SortFunc(fs, bytes.Compare)
}

// TestReceiveByteForByte: N distinct frames sent, the same N received,
// byte for byte, across two queues, for several UMEM layouts.
func TestReceiveByteForByte(t *testing.T) {
	for _, tc := range []struct {
		name string
		umem xsk.UMEMOptions
		bind xsk.BindMode
	}{
		{"default", xsk.UMEMOptions{}, xsk.BindAuto},
		{"copy-2k-headroom", xsk.UMEMOptions{FrameSize: 2048, Headroom: 128}, xsk.BindCopy},
		{"unaligned-debug", xsk.UMEMOptions{Unaligned: true, Debug: true}, xsk.BindAuto},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 4, xsk.RedirectOptions{})
			var socks []*xsk.Socket
			for q := range 4 {
				socks = append(socks, e.open(t, xsk.Options{Queue: q, UMEMOptions: tc.umem, Bind: tc.bind}))
			}
			if socks[0].ZeroCopy() {
				t.Errorf("veth socket reports zero-copy")
			}
			const n = 600
			sent := sendDistinct(t, e, n, 100)
			var got [][]byte
			for q, s := range socks {
				// Queues 2 and 3 get nothing: only two CPUs send.
				want := map[int]int{0: n / 2, 1: n / 2}[q]
				r := receive(t, s, want, 5*time.Second)
				if len(r) != want {
					t.Errorf("queue %d: received %d frames, want %d", q, len(r), want)
				}
				got = append(got, r...)
				if err := s.CheckFrames(); err != nil {
					t.Error(err)
				}
			}
			sortFrames(sent)
			sortFrames(got)
			if len(got) != len(sent) {
				t.Fatalf("received %d frames, sent %d", len(got), len(sent))
			}
			for i := range sent {
				if !bytes.Equal(got[i], sent[i]) {
					t.Fatalf("frame %d differs:\n got %x\nwant %x", i, got[i], sent[i])
				}
			}
			st, err := socks[0].Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.RxFrames != n/2 || st.Kernel.Fields != 6 {
				t.Errorf("queue 0 stats: %+v", st)
			}
		})
	}
}

// xdpMD is struct xdp_md, the context of a BPF_PROG_TEST_RUN of an XDP
// program (cilium/ebpf's own is internal).
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// redirectRules is the rule file of TestRedirectVerdicts: drop rules
// (the drop command's, prefix and compound), then a per-queue filter of
// origin redirect, as xdpdrop redirect --queues 0-2 makes it.
const (
	dropRules = `
drop src 10.1.0.0/16
drop udp dport 11211
`
	redirectFilter = `
redirect queue 0
pass udp dport 53 queue 1
redirect tcp queue 1
redirect udp src 2001:db8:1::/48 sport 100-200 queue 1
drop queue 2
`
)

// TestRedirectVerdicts feeds the same frames and rule files, with
// BPF_PROG_TEST_RUN on queues 0-3 of a veth, to the program as xdpdrop
// drop loads it (no sockets) and as xdpdrop redirect uses it (sockets on
// queues 0-2), and to the model: every verdict must be the same, except
// that a frame a redirect rule chose goes to its socket (XDP_REDIRECT)
// where there is one and to the stack (XDP_PASS) where there is none. The
// drop rules come first: a frame they drop is never redirected.
func TestRedirectVerdicts(t *testing.T) {
	e := newEnv(t, 4, xsk.RedirectOptions{})
	load := func() *fastdrop.Engine {
		eng, err := fastdrop.New(fastdrop.Options{MaxRules: 64, IPv4Blocks: 16, IPv4HostBlocks: 16, IPv6Entries: 1024})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		for _, f := range []struct{ origin, text string }{{"", dropRules}, {fastdrop.OriginRedirect, redirectFilter}} {
			rs, err := fastdrop.Parse(strings.NewReader(f.text), "rules")
			if err != nil {
				t.Fatal(err)
			}
			if err := eng.ApplyOrigin(f.origin, rs); err != nil {
				t.Fatal(err)
			}
		}
		return eng
	}
	dropProg, redirProg := load(), load()
	for q := range 3 {
		s := e.open(t, xsk.Options{Queue: q, FillSize: 64, RxSize: 64, TxSize: 64, CompletionSize: 64, Frames: 128})
		if err := xsk.RegisterFunc(redirProg.RegisterSocket).Register(s); err != nil {
			t.Fatal(err)
		}
	}
	all, err := redirProg.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	model := fastdrop.NewModel(all)
	const (
		drop     = 1
		pass     = 2
		redirect = 4
	)
	udp := func(src, dst string, sport, dport uint16) []byte {
		return frames.UDP4(src, dst, sport, dport, 10).Bytes
	}
	cases := []struct {
		name  string
		queue uint32
		frame []byte
		want  uint32 // with sockets on queues 0-2
	}{
		{"q0 anything", 0, udp("10.2.2.3", "10.0.0.1", 1, 53), redirect},
		{"q0 arp", 0, frames.ARPRequest("10.0.0.1", "10.0.0.2").Bytes, redirect},
		{"q0 drop prefix first", 0, udp("10.1.2.3", "10.0.0.1", 1, 53), drop},
		{"q0 drop rule first", 0, udp("10.2.2.3", "10.0.0.1", 1, 11211), drop},
		{"q1 dns passes", 1, udp("10.2.2.3", "10.0.0.1", 1, 53), pass},
		{"q1 prefix drops", 1, udp("10.1.2.3", "10.0.0.1", 1, 54), drop},
		{"q1 tcp redirects", 1, frames.TCP4("10.2.0.1", "10.0.0.1", 1, 80, 0).Bytes, redirect},
		{"q1 v6 sport in range", 1, frames.UDP6("2001:db8:1::5", "2001:db8::1", 150, 9, 4).Bytes, redirect},
		{"q1 v6 sport out of range", 1, frames.UDP6("2001:db8:1::5", "2001:db8::1", 250, 9, 4).Bytes, pass},
		{"q1 v6 other prefix", 1, frames.UDP6("2001:db8:2::5", "2001:db8::1", 150, 9, 4).Bytes, pass},
		{"q1 default", 1, udp("10.2.0.1", "10.0.0.1", 1, 54), pass},
		{"q1 arp default", 1, frames.ARPRequest("10.0.0.1", "10.0.0.2").Bytes, pass},
		{"q1 truncated ip", 1, frames.UDP4("10.1.2.3", "10.0.0.1", 1, 54, 0).Truncate(20).Bytes, pass},
		{"q2 drop", 2, udp("10.2.0.1", "10.0.0.1", 1, 54), drop},
		{"q3 not selected", 3, udp("10.2.2.3", "10.0.0.1", 1, 54), pass},
	}
	run := func(p *ebpf.Program, frame []byte, queue uint32) uint32 {
		t.Helper()
		ctx := xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(e.veth.Index), RxQueueIndex: queue}
		ret, err := p.Run(&ebpf.RunOptions{Data: frame, Context: &ctx})
		if err != nil {
			t.Fatalf("test run: %v", err)
		}
		return ret
	}
	xdpOf := map[fastdrop.Action]uint32{fastdrop.ActionDrop: drop, fastdrop.ActionPass: pass, fastdrop.ActionRedirect: redirect}
	check := func(name string, frame []byte, queue uint32, want uint32) {
		t.Helper()
		got, gotDrop := run(redirProg.Program(), frame, queue), run(dropProg.Program(), frame, queue)
		if want != 0 && got != want {
			t.Errorf("%s: redirect program's verdict %d, want %d", name, got, want)
		}
		m := model.EvalOn(frame, queue).Verdict
		wantDrop := xdpOf[m]
		if m == fastdrop.ActionRedirect {
			wantDrop = pass // no socket
			if want == 0 && queue < 3 {
				want = redirect
			} else if want == 0 {
				want = pass
			}
		}
		if want == 0 {
			want = wantDrop
		}
		if got != want || gotDrop != wantDrop {
			t.Errorf("%s (queue %d): redirect program %d, drop program %d; model %s", name, queue, got, gotDrop, m)
		}
	}
	for _, c := range cases {
		check(c.name, c.frame, c.queue, c.want)
	}
	rng := rand.New(rand.NewPCG(14, 1))
	for i := range 3000 {
		frame := frames.Random(rng).Build().Bytes
		if len(frame) < 14 {
			continue
		}
		check(fmt.Sprintf("random frame %d %x", i, frame), frame, uint32(rng.IntN(4)), 0)
	}
	// The redirect counters by queue: what the sockets took, and (on the
	// program without sockets) what none could.
	qc, err := redirProg.QueueCounters(0, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if qc[0].Redirected.Packets == 0 || qc[1].Redirected.Packets == 0 || qc[0].NoSocket.Packets != 0 || qc[2].Redirected.Packets+qc[2].NoSocket.Packets != 0 {
		t.Errorf("redirect counters of queues 0, 1, 3: %+v", qc)
	}
	if qc, err := dropProg.QueueCounters(0); err != nil || qc[0].Redirected.Packets != 0 || qc[0].NoSocket.Packets == 0 {
		t.Errorf("drop program's redirect counters of queue 0: %+v, %v", qc, err)
	}
	// An unregistered queue falls back to the stack.
	if err := redirProg.UnregisterSocket(0); err != nil {
		t.Fatal(err)
	}
	if ret := run(redirProg.Program(), udp("10.2.2.3", "10.0.0.1", 1, 53), 0); ret != pass {
		t.Errorf("queue 0 without socket: verdict %d, want pass", ret)
	}
}

func TestRedirectOptionsValidation(t *testing.T) {
	if _, err := xsk.NewRedirect(xsk.RedirectOptions{Queues: []int{64}}); !errors.Is(err, xsk.ErrInvalidOptions) {
		t.Errorf("queue 64: %v", err)
	}
}

// TestQueueSelectionLive: only queue 1 redirects; frames arriving on queue
// 0 go to the kernel stack even though a socket is registered there, and a
// UDP socket of the stack receives them.
func TestQueueSelectionLive(t *testing.T) {
	e := newEnv(t, 4, xsk.RedirectOptions{Queues: []int{1}})
	s0 := e.open(t, xsk.Options{Queue: 0})
	s1 := e.open(t, xsk.Options{Queue: 1})

	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("198.18.0.1"), Port: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()

	const n = 50
	var q0 [][]byte
	for i := range n {
		q0 = append(q0, e.udp(3000, 2000, i, 16))
	}
	e.send(t, 0, 1, q0...)
	e.send(t, 1, 1, e.udp(3000, 2000, 1000, 16))

	if got := receive(t, s1, 1, 5*time.Second); len(got) != 1 {
		t.Errorf("queue 1 socket received %d frames, want 1", len(got))
	}
	stack := 0
	buf := make([]byte, 2048)
	for stack < n {
		udp.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, _, err := udp.ReadFromUDP(buf); err != nil {
			break
		}
		stack++
	}
	if stack != n {
		t.Errorf("kernel stack received %d of the %d frames of unselected queue 0", stack, n)
	}
	if got := receive(t, s0, 1, 100*time.Millisecond); len(got) != 0 {
		t.Errorf("socket of unselected queue 0 received %d frames", len(got))
	}
	c, err := e.red.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c[0].Passed.Packets != n || c[0].Redirected.Packets != 0 || c[1].Redirected.Packets != 1 {
		t.Errorf("counters: queue 0 %+v, queue 1 %+v", c[0], c[1])
	}
}

// TestFallbackToStack: with no socket registered on a selected queue the
// program passes frames to the stack (bpf_redirect_map's XDP_PASS).
func TestFallbackToStack(t *testing.T) {
	e := newEnv(t, 2, xsk.RedirectOptions{})
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("198.18.0.1"), Port: 2001})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	f := e.udp(3000, 2001, 7, 32)
	e.send(t, 0, 10, f)
	buf := make([]byte, 2048)
	for i := range 10 {
		udp.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _, err := udp.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if !bytes.Equal(buf[:n], f[42:]) {
			t.Fatalf("datagram %d payload %x, want %x", i, buf[:n], f[42:])
		}
	}
	c, err := e.red.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c[0].Passed.Packets != 10 || c[0].Redirected.Packets != 0 {
		t.Errorf("queue 0 counters %+v", c[0])
	}
}

// TestSharedUMEM: two queues, one UMEM; both receive; the books of the
// whole UMEM balance; a second socket on the same queue and UMEM is refused.
func TestSharedUMEM(t *testing.T) {
	e := newEnv(t, 2, xsk.RedirectOptions{})
	u, err := xsk.NewUMEM(xsk.UMEMOptions{FrameCount: 2 * 4096, FrameSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := u.Close(); err != nil {
			t.Error(err)
		}
	}()
	s0 := e.open(t, xsk.Options{Queue: 0, UMEM: u})
	s1 := e.open(t, xsk.Options{Queue: 1, UMEM: u})
	if u.Pooled() != 0 {
		t.Errorf("UMEM pool holds %d frames after two default sockets, want 0", u.Pooled())
	}
	_, err = xsk.Open(xsk.Options{Ifindex: e.veth.Index, Queue: 1, UMEM: u, Frames: 1})
	if !errors.Is(err, xsk.ErrInvalidOptions) {
		t.Errorf("second socket on queue 1 with the same UMEM: %v, want ErrInvalidOptions", err)
	}
	_, err = xsk.Open(xsk.Options{Ifindex: e.veth.Index, Queue: 1, UMEM: u})
	if !errors.Is(err, xsk.ErrInvalidOptions) {
		t.Errorf("socket on an exhausted UMEM: %v, want ErrInvalidOptions", err)
	}

	sent := sendDistinct(t, e, 400, 60)
	got := append(receive(t, s0, 200, 5*time.Second), receive(t, s1, 200, 5*time.Second)...)
	sortFrames(sent)
	sortFrames(got)
	if len(got) != len(sent) {
		t.Fatalf("received %d of %d frames", len(got), len(sent))
	}
	for i := range got {
		if !bytes.Equal(got[i], sent[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if err := u.CheckFrames(); err != nil {
		t.Error(err)
	}

	// A frame received on queue 0 sent out of queue 1's socket: both are
	// driven by this goroutine, so it may move.
	e.send(t, 0, 1, e.udp(1, 2, 3, 20))
	buf := make([]xsk.Frame, 1)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if n, _ := s0.Receive(buf); n == 1 {
			break
		}
		s0.Wait(10 * time.Millisecond)
	}
	if buf[0].Data == nil {
		t.Fatal("no frame on queue 0")
	}
	xsk.SwapMACs(buf[0].Data)
	if n, err := s1.Transmit(buf); n != 1 || err != nil {
		t.Fatalf("transmit on queue 1: %d, %v", n, err)
	}
	if err := u.CheckFrames(); err != nil {
		t.Error(err)
	}

	if err := s0.Close(); err != nil {
		t.Fatal(err)
	}
	if err := u.CheckFrames(); err != nil {
		t.Error(err)
	}
	if u.Pooled() == 0 {
		t.Error("closing socket 0 returned no frames to the UMEM")
	}
}

// TestRxRingFull: a consumer that does not keep up makes the kernel count
// rx_ring_full; a consumer that does keeps it still.
func TestRxRingFull(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	s := e.open(t, xsk.Options{Queue: 0, RxSize: 64, FillSize: 512, Frames: 512 + 2048})
	e.send(t, 0, 1000, e.udp(1, 2, 3, 20))
	var st xsk.Stats
	var err error
	// The kernel's receive work may finish a moment after the send.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		if st, err = s.Stats(); err != nil {
			t.Fatal(err)
		}
		if st.Kernel.RxRingFull+64 >= 1000 || time.Now().After(deadline) {
			break
		}
	}
	if st.Kernel.RxRingFull == 0 {
		t.Errorf("rx_ring_full did not move with a 64-entry RX ring and 1000 frames unread: %+v", st.Kernel)
	}
	got := receive(t, s, 1000, 200*time.Millisecond)
	if len(got) != 64 {
		t.Errorf("received %d frames from a full 64-entry RX ring", len(got))
	}
	full := st.Kernel.RxRingFull
	if full+64 != 1000 {
		t.Errorf("rx_ring_full %d + 64 received != 1000 sent", full)
	}
	// Now keep up: frames sent in batches that fit are all received.
	for range 5 {
		e.send(t, 0, 60, e.udp(1, 2, 3, 20))
		if got := receive(t, s, 60, 5*time.Second); len(got) != 60 {
			t.Fatalf("received %d of 60", len(got))
		}
	}
	st, _ = s.Stats()
	if st.Kernel.RxRingFull != full {
		t.Errorf("rx_ring_full moved from %d to %d while the consumer kept up", full, st.Kernel.RxRingFull)
	}
	if err := s.CheckFrames(); err != nil {
		t.Error(err)
	}
}

// TestZeroCopyRefused: veth has no zero-copy; the error says so and
// nothing leaks.
func TestZeroCopyRefused(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	before := fds(t)
	_, err := xsk.Open(xsk.Options{Ifindex: e.veth.Index, Queue: 0, Bind: xsk.BindZeroCopy})
	if !errors.Is(err, xsk.ErrZeroCopyUnsupported) || !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("zero-copy bind on veth: %v, want ErrZeroCopyUnsupported wrapping EOPNOTSUPP", err)
	}
	// In words a user of the CLI can act on too (ErrZeroCopyUnsupported's
	// doc names BindCopy and BindAuto for Go callers).
	if !strings.Contains(err.Error(), "(bind in copy mode, or let the kernel choose the mode)") {
		t.Errorf("error does not say what to do instead: %v", err)
	}
	if after := fds(t); !slices.Equal(before, after) {
		t.Errorf("failed Open leaked file descriptors: before %v after %v", before, after)
	}
	// Auto on the same queue picks copy mode.
	s := e.open(t, xsk.Options{Queue: 0, Bind: xsk.BindAuto})
	if s.ZeroCopy() {
		t.Error("BindAuto on veth chose zero-copy")
	}
}

// fds lists the process's open file descriptors with what they point to.
func fds(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory's own fd, gone by now
		}
		out = append(out, e.Name()+"->"+l)
	}
	slices.Sort(out)
	return out
}

// mappings returns the ranges in /proc/self/maps and how many of them map
// a socket (AF_XDP rings).
func mappings(t *testing.T) (ranges [][2]uint64, sockets int) {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		lo, hi, _ := strings.Cut(strings.Fields(line)[0], "-")
		a, _ := strconv.ParseUint(lo, 16, 64)
		b, _ := strconv.ParseUint(hi, 16, 64)
		ranges = append(ranges, [2]uint64{a, b})
		if strings.Contains(line, "socket:[") {
			sockets++
		}
	}
	return ranges, sockets
}

func mapped(ranges [][2]uint64, addr uint64) bool {
	for _, r := range ranges {
		if addr >= r[0] && addr < r[1] {
			return true
		}
	}
	return false
}

// TestCloseReleasesEverything: after traffic, Close leaves no file
// descriptor, ring mapping or UMEM mapping behind, and every frame is back.
func TestCloseReleasesEverything(t *testing.T) {
	e := newEnv(t, 2, xsk.RedirectOptions{})
	fdsBefore := fds(t)
	_, sockMapsBefore := mappings(t)

	shared, err := xsk.NewUMEM(xsk.UMEMOptions{FrameCount: 4096})
	if err != nil {
		t.Fatal(err)
	}
	var socks []*xsk.Socket
	for q := range 2 {
		s, err := xsk.Open(xsk.Options{Ifindex: e.veth.Index, Queue: q, UMEM: shared, Frames: 2048, FillSize: 1024, TxSize: 1024})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.red.Register(s); err != nil {
			t.Fatal(err)
		}
		socks = append(socks, s)
	}
	sendDistinct(t, e, 200, 60)
	for _, s := range socks {
		receive(t, s, 100, 5*time.Second)
	}
	// Hold one frame across Close: Close takes it back.
	e.send(t, 0, 1, e.udp(1, 2, 3, 4))
	held := make([]xsk.Frame, 1)
	for n := 0; n == 0; n, _ = socks[0].Receive(held) {
		socks[0].Wait(100 * time.Millisecond)
	}
	ranges, sockMaps := mappings(t)
	if sockMaps != sockMapsBefore+8 {
		t.Errorf("%d socket mappings with 2 sockets open, want %d", sockMaps, sockMapsBefore+8)
	}
	base := xsk.UMEMAddr(shared)
	if !mapped(ranges, base) {
		t.Fatalf("UMEM at %#x not found in /proc/self/maps", base)
	}

	for q := range 2 {
		if err := e.red.Unregister(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := shared.Close(); err != nil { // closes both sockets
		t.Fatal(err)
	}
	for _, s := range socks {
		if err := s.CheckFrames(); err != nil {
			t.Error(err)
		}
		if a := s.Accounting(); a.Owned != 0 {
			t.Errorf("closed socket still owns %d frames", a.Owned)
		}
		if _, err := s.Receive(held); !errors.Is(err, xsk.ErrClosed) {
			t.Errorf("Receive after Close: %v", err)
		}
	}
	if shared.Pooled() != 4096 {
		t.Errorf("UMEM pool holds %d of 4096 frames after Close", shared.Pooled())
	}
	if after := fds(t); !slices.Equal(fdsBefore, after) {
		t.Errorf("file descriptors leaked:\nbefore %v\nafter  %v", fdsBefore, after)
	}
	ranges, sockMaps = mappings(t)
	if sockMaps != sockMapsBefore {
		t.Errorf("%d socket mappings left after Close, want %d", sockMaps, sockMapsBefore)
	}
	if mapped(ranges, base) {
		t.Errorf("UMEM at %#x still mapped after Close", base)
	}

	// A private UMEM goes with its socket.
	s, err := xsk.Open(xsk.Options{Ifindex: e.veth.Index, Queue: 0})
	if err != nil {
		t.Fatal(err)
	}
	base = xsk.UMEMAddr(s.UMEM())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if ranges, _ := mappings(t); mapped(ranges, base) {
		t.Errorf("private UMEM still mapped after Close")
	}
	if after := fds(t); !slices.Equal(fdsBefore, after) {
		t.Errorf("file descriptors leaked by a private-UMEM socket")
	}
}

// TestAccountingUnderLoad runs a handler that mixes every verdict while
// traffic flows on two queues, checking the books from inside the handler
// (the goroutine that drives the socket) and again after Close.
func TestAccountingUnderLoad(t *testing.T) {
	e := newEnv(t, 2, xsk.RedirectOptions{})
	u, err := xsk.NewUMEM(xsk.UMEMOptions{FrameCount: 2048, Debug: true})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	var socks []*xsk.Socket
	for q := range 2 {
		socks = append(socks, e.open(t, xsk.Options{Queue: q, UMEM: u, Frames: 1024, FillSize: 256, RxSize: 256, TxSize: 256, CompletionSize: 256, Batch: 32}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	checks := make([]int, 2)
	for i, s := range socks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var kept []xsk.Frame
			batches := 0
			errs[i] = s.Run(ctx, func(fs []xsk.Frame, v []xsk.Verdict) error {
				batches++
				if len(kept) > 0 { // give back what an earlier batch kept
					if err := s.Release(kept); err != nil {
						return err
					}
					kept = kept[:0]
				}
				for j := range fs {
					switch j % 3 {
					case 1:
						xsk.SwapMACs(fs[j].Data)
						v[j] = xsk.Transmit
					case 2:
						v[j] = xsk.Keep
						kept = append(kept, fs[j])
					}
				}
				if batches%16 == 0 {
					checks[i]++
					return s.CheckFrames()
				}
				return nil
			})
			if err := s.Release(kept); err != nil && errs[i] == nil {
				errs[i] = err
			}
		}()
	}
	// 2 x 20000 frames while the sockets run.
	for range 10 {
		e.send(t, 0, 2000, e.udp(1, 2, 3, 40))
		e.send(t, 1, 2000, e.udp(1, 2, 3, 40))
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("socket %d: %v", i, err)
		}
	}
	for i, s := range socks {
		st, _ := s.Stats()
		t.Logf("queue %d: %d checks, stats %+v", i, checks[i], st)
		if st.RxFrames == 0 || st.TxFrames == 0 {
			t.Errorf("queue %d moved no traffic", i)
		}
		if checks[i] == 0 {
			t.Errorf("queue %d: the books were never checked under load", i)
		}
	}
	if err := u.CheckFrames(); err != nil {
		t.Error(err)
	}
	for _, s := range socks {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}
	if err := u.CheckFrames(); err != nil {
		t.Error(err)
	}
	if u.Pooled() != 2048 {
		t.Errorf("pool holds %d of 2048 frames after Close", u.Pooled())
	}
}

// TestInvalidFrames: double release and foreign data are refused.
func TestInvalidFrames(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	s := e.open(t, xsk.Options{Queue: 0, Frames: 4096})
	fs := make([]xsk.Frame, 2)
	if n := s.Alloc(fs); n != 2 {
		t.Fatalf("Alloc got %d frames", n)
	}
	copyFrame := fs[0]
	if err := s.Release(fs[:1]); err != nil {
		t.Fatal(err)
	}
	if err := s.Release([]xsk.Frame{copyFrame}); !errors.Is(err, xsk.ErrInvalidFrame) {
		t.Errorf("double release: %v, want ErrInvalidFrame", err)
	}
	if _, err := s.Transmit([]xsk.Frame{copyFrame}); !errors.Is(err, xsk.ErrInvalidFrame) {
		t.Errorf("transmit of a released frame: %v, want ErrInvalidFrame", err)
	}
	f := fs[1]
	f.Data = make([]byte, 60) // not UMEM memory
	if n, err := s.Transmit([]xsk.Frame{f}); n != 0 || !errors.Is(err, xsk.ErrInvalidFrame) {
		t.Errorf("transmit of foreign data: %d, %v", n, err)
	}
	if err := s.Release([]xsk.Frame{fs[1]}); err != nil {
		t.Errorf("release after refused transmit: %v", err)
	}
	if err := s.CheckFrames(); err != nil {
		t.Error(err)
	}
}

// TestRunStops: Run returns nil when its context ends and when the socket
// is closed from another goroutine, in every wait mode.
func TestRunStops(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	for _, w := range []xsk.WaitMode{xsk.WaitAdaptive, xsk.WaitBlock, xsk.WaitPoll, xsk.WaitSpin} {
		t.Run(w.String(), func(t *testing.T) {
			s, err := xsk.Open(xsk.Options{Ifindex: e.veth.Index, Queue: 0, Wait: w})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if err := s.Run(ctx, func([]xsk.Frame, []xsk.Verdict) error { return nil }); err != nil {
				t.Errorf("Run after context timeout: %v", err)
			}
			done := make(chan error)
			go func() { done <- s.Run(context.Background(), func([]xsk.Frame, []xsk.Verdict) error { return nil }) }()
			time.Sleep(20 * time.Millisecond)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run after Close: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return after Close")
			}
		})
	}
}

// TestModes runs the three classic loops briefly on live traffic.
func TestModes(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	s := e.open(t, xsk.Options{Queue: 0})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	sent := e.sendAsync(0, 3000, e.udp(1, 2, 3, 20))
	if err := xsk.RxDrop(ctx, s, xsk.ModeOptions{Frames: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stats()
	if st.RxFrames < 1000 {
		t.Errorf("rxdrop stopped at %d frames", st.RxFrames)
	}

	sent = e.sendAsync(0, 3000, e.udp(1, 2, 3, 20))
	if err := xsk.L2Fwd(ctx, s, xsk.ModeOptions{Frames: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	st2, _ := s.Stats()
	if st2.TxFrames < 1000 {
		t.Errorf("l2fwd sent %d frames", st2.TxFrames)
	}

	frame := e.udp(1, 2, 3, 20)
	if err := xsk.TxOnly(ctx, s, frame, xsk.ModeOptions{Frames: 5000}); err != nil {
		t.Fatal(err)
	}
	st3, _ := s.Stats()
	if st3.Completed-st2.Completed < 5000 {
		t.Errorf("txonly completed %d frames", st3.Completed-st2.Completed)
	}
	if err := s.CheckFrames(); err != nil {
		t.Error(err)
	}
}

// TestOptionsValidation needs no kernel: bad options fail before any
// system call.
func TestOptionsValidation(t *testing.T) {
	for i, o := range []xsk.Options{
		{},
		{Ifindex: 1, Batch: 513},
		{Ifindex: 1, Batch: -1},
		{Ifindex: 1, FillSize: 1000},
		{Ifindex: 1, Queue: -1},
		{Ifindex: 1, Wait: 9},
		{Ifindex: 1, UMEMOptions: xsk.UMEMOptions{FrameSize: 3000}},
		{Ifindex: 1, UMEMOptions: xsk.UMEMOptions{Headroom: 4000}},
	} {
		if _, err := xsk.Open(o); !errors.Is(err, xsk.ErrInvalidOptions) {
			t.Errorf("options %d: %v, want ErrInvalidOptions", i, err)
		}
	}
}

func Example() {
	// Load the redirect program; attach red.Program() to eth3 with package
	// loader (or link.AttachXDP) before traffic can reach the socket.
	red, err := xsk.NewRedirect(xsk.RedirectOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer red.Close()
	s, err := xsk.Open(xsk.Options{Interface: "eth3", Queue: 0})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	if err := red.Register(s); err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	err = s.Run(ctx, func(frames []xsk.Frame, verdicts []xsk.Verdict) error {
		n += len(frames) // frames[i].Data is the packet; verdicts default to Release
		return nil
	})
	fmt.Println(n, err)
}

func ExampleL2Fwd() {
	s, err := xsk.Open(xsk.Options{Interface: "eth3", Queue: 0})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	// Swap MACs and send every frame back out, until interrupted.
	if err := xsk.L2Fwd(context.Background(), s, xsk.ModeOptions{}); err != nil {
		fmt.Println(err)
	}
}

func ExampleSocket_Receive() {
	s, err := xsk.Open(xsk.Options{Interface: "eth3", Queue: 0})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	frames := make([]xsk.Frame, 64)
	for {
		if err := s.Wait(-1); err != nil {
			return
		}
		n, _ := s.Receive(frames)
		for _, f := range frames[:n] {
			_ = f.Data // a view into the UMEM, valid until released
		}
		if err := s.Release(frames[:n]); err != nil {
			fmt.Println(err)
		}
	}
}

// TestBusyPoll: the socket options are set as asked (budget 64 by
// default), and the NAPI helper writes, reads back, restores and explains.
func TestBusyPoll(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	s := e.open(t, xsk.Options{Queue: 0, BusyPoll: xsk.BusyPoll{Enable: true}})
	for _, o := range []struct {
		name      string
		opt, want int
	}{
		{"SO_PREFER_BUSY_POLL", unix.SO_PREFER_BUSY_POLL, 1},
		{"SO_BUSY_POLL", unix.SO_BUSY_POLL, 20},
		// SO_BUSY_POLL_BUDGET has no getsockopt in the kernel; Open
		// would have failed had setting it failed.
	} {
		got, err := unix.GetsockoptInt(s.Fd(), unix.SOL_SOCKET, o.opt)
		if err != nil || got != o.want {
			t.Errorf("%s = %d (%v), want %d", o.name, got, err, o.want)
		}
	}

	if note := xsk.NAPIDeferNote(e.veth.Name); !strings.Contains(note, "napi_defer_hard_irqs") {
		t.Errorf("note on a fresh veth: %q", note)
	}
	prev, err := xsk.SetNAPIDefer(e.veth.Name, xsk.RecommendedNAPIDefer())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := xsk.GetNAPIDefer(e.veth.Name); err != nil || got != xsk.RecommendedNAPIDefer() {
		t.Errorf("read back %+v (%v)", got, err)
	}
	if note := xsk.NAPIDeferNote(e.veth.Name); note != "" {
		t.Errorf("note after setting: %q", note)
	}
	if _, err := xsk.SetNAPIDefer(e.veth.Name, prev); err != nil {
		t.Fatal(err)
	}
	if got, _ := xsk.GetNAPIDefer(e.veth.Name); got != prev {
		t.Errorf("restore: %+v, want %+v", got, prev)
	}
	if _, err := xsk.GetNAPIDefer("../etc"); !errors.Is(err, xsk.ErrInvalidOptions) {
		t.Errorf("path in interface name: %v", err)
	}
}

// TestStatsFromHandlerDuringClose: a handler that reads Stats while
// another goroutine closes the socket must not deadlock Close.
func TestStatsFromHandlerDuringClose(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	s, err := xsk.Open(xsk.Options{Ifindex: e.veth.Index, Queue: 0})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.red.Register(s); err != nil {
		t.Fatal(err)
	}
	inHandler := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		done <- s.Run(context.Background(), func([]xsk.Frame, []xsk.Verdict) error {
			once.Do(func() { close(inHandler) })
			time.Sleep(20 * time.Millisecond) // Close starts meanwhile
			s.Stats()                         // ErrClosed or numbers; must return
			return nil
		})
	}()
	e.send(t, 0, 10, e.udp(1, 2, 3, 4))
	<-inHandler
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestRunHandlerMistakes: a handler that gets a frame wrong (moves its Data
// out of the UMEM and asks to transmit it, or releases it itself and
// leaves the verdict Release) makes Run return an error wrapping
// ErrInvalidFrame, and every frame of the batch still goes back to the
// socket: afterwards the application holds none, and the books balance.
func TestRunHandlerMistakes(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	s := e.open(t, xsk.Options{Queue: 0, UMEMOptions: xsk.UMEMOptions{Debug: true}})
	for _, tc := range []struct {
		name    string
		mistake func(fs []xsk.Frame, v []xsk.Verdict) error
	}{
		{"transmit data outside the UMEM", func(fs []xsk.Frame, v []xsk.Verdict) error {
			fs[0].Data = append([]byte(nil), fs[0].Data...) // a copy on the heap
			v[0], v[2] = xsk.Transmit, xsk.Transmit
			return nil
		}},
		{"release twice", func(fs []xsk.Frame, v []xsk.Verdict) error {
			return s.Release(fs[1:2]) // and the verdict stays Release
		}},
		{"release twice, some transmitted", func(fs []xsk.Frame, v []xsk.Verdict) error {
			v[0], v[3] = xsk.Transmit, xsk.Transmit
			return s.Release(fs[1:2])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 8
			var batch [][]byte
			for i := range n {
				batch = append(batch, e.udp(1, 2, i, 20))
			}
			e.send(t, 0, 1, batch...)
			for deadline := time.Now().Add(5 * time.Second); s.Accounting().RxRing < n; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d frames on the RX ring", s.Accounting().RxRing, n)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := s.Run(ctx, func(fs []xsk.Frame, v []xsk.Verdict) error {
				if len(fs) != n {
					return fmt.Errorf("batch of %d frames, want %d", len(fs), n)
				}
				return tc.mistake(fs, v)
			})
			if !errors.Is(err, xsk.ErrInvalidFrame) {
				t.Fatalf("Run: %v, want ErrInvalidFrame", err)
			}
			if a := s.Accounting(); a.Held != 0 {
				t.Errorf("after Run the application holds %d frames it never kept: %+v", a.Held, a)
			}
			if err := s.CheckFrames(); err != nil {
				t.Error(err)
			}
		})
	}
}

// capture opens an AF_PACKET socket in the peer's namespace that receives
// every frame arriving at the peer end.
func (e *env) capture(t *testing.T) int {
	t.Helper()
	const ethPAll = unix.ETH_P_ALL>>8 | unix.ETH_P_ALL&0xff<<8 // network order
	fd := -1
	if err := e.veth.InPeerNS(func() error {
		var err error
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, ethPAll); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: ethPAll, Ifindex: e.veth.PeerIndex})
	}); err != nil {
		t.Fatalf("capture on the peer: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// captured reads frames from a capture socket until want frames that
// went from the host end to the peer's MAC have arrived or timeout passes.
func (e *env) captured(t *testing.T, fd, want int, timeout time.Duration) [][]byte {
	t.Helper()
	var got [][]byte
	buf := make([]byte, 4096)
	deadline := time.Now().Add(timeout)
	for len(got) < want && time.Now().Before(deadline) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, 10); err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
		if pfd[0].Revents == 0 {
			continue
		}
		n, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
		if err != nil {
			continue
		}
		b := buf[:n]
		if ours(b) && bytes.Equal(b[0:6], e.veth.PeerMAC) && bytes.Equal(b[6:12], e.veth.MAC) {
			got = append(got, append([]byte(nil), b...))
		}
	}
	return got
}

// TestL2FwdByteForByte: every frame L2Fwd receives goes back out and
// reaches the peer byte for byte, with its MAC addresses swapped, with the
// smallest and the largest batch.
func TestL2FwdByteForByte(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	fd := e.capture(t)
	for _, batch := range []int{1, xsk.MaxBatch} {
		t.Run(fmt.Sprint("batch", batch), func(t *testing.T) {
			s, err := xsk.Open(xsk.Options{Ifindex: e.veth.Index, Queue: 0, Batch: batch, UMEMOptions: xsk.UMEMOptions{Debug: true}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := e.red.Register(s); err != nil {
				t.Fatal(err)
			}
			const n = 600
			var sent, want [][]byte
			for i := range n {
				f := e.udp(uint16(1000+i%50), 2000, batch*n+i, 10+i%100)
				sent = append(sent, f)
				w := append([]byte(nil), f...)
				xsk.SwapMACs(w)
				want = append(want, w)
			}
			e.send(t, 0, 1, sent...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := xsk.L2Fwd(ctx, s, xsk.ModeOptions{Frames: n}); err != nil {
				t.Fatal(err)
			}
			// Reap the completions: in copy mode the kernel sends in
			// Transmit's and Complete's sendto.
			for deadline := time.Now().Add(5 * time.Second); s.Accounting().TX > 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if _, err := s.Complete(); err != nil {
					t.Fatal(err)
				}
			}
			got := e.captured(t, fd, n, 5*time.Second)
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.RxFrames != n || st.TxFrames != n || st.Completed != n || st.RxBatches < n/uint64(batch) {
				t.Errorf("stats: %+v", st)
			}
			sortFrames(want)
			sortFrames(got)
			if len(got) != len(want) {
				t.Fatalf("the peer received %d of the %d frames forwarded", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("frame %d differs:\n got %x\nwant %x", i, got[i], want[i])
				}
			}
			if err := s.CheckFrames(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestTxOnlyCount: TxOnly with ModeOptions.Frames sends that many frames,
// not a batch more, and each reaches the peer; the CLI's gen --count and
// its paced mode rely on it.
func TestTxOnlyCount(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	fd := e.capture(t)
	s := e.open(t, xsk.Options{Queue: 0})
	frame := e.udp(1, 2, 3, 20)
	xsk.SwapMACs(frame) // from the host end to the peer
	for _, n := range []uint64{1, 10, 100, 1000} {
		before, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = xsk.TxOnly(ctx, s, frame, xsk.ModeOptions{Frames: n})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		after, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if q, c := after.TxFrames-before.TxFrames, after.Completed-before.Completed; q != n || c != n {
			t.Errorf("TxOnly of %d frames queued %d and completed %d", n, q, c)
		}
		if got := e.captured(t, fd, int(n), 5*time.Second); uint64(len(got)) != n {
			t.Errorf("TxOnly of %d frames: %d reached the peer", n, len(got))
		}
	}
	if err := s.CheckFrames(); err != nil {
		t.Error(err)
	}
}

// TestTxOnlyNoFrames: a socket whose frames are all lent for receiving
// (Options.Frames no more than FillSize) has nothing to send with; TxOnly
// says so instead of spinning until its context ends.
func TestTxOnlyNoFrames(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	s := e.open(t, xsk.Options{Queue: 0, FillSize: 64, Frames: 64})
	frame := e.udp(1, 2, 3, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := xsk.TxOnly(ctx, s, frame, xsk.ModeOptions{Frames: 10})
	if !errors.Is(err, xsk.ErrInvalidOptions) || !strings.Contains(err.Error(), "Frames") {
		t.Errorf("TxOnly without free frames: %v, want ErrInvalidOptions naming Options.Frames", err)
	}
	if err := s.CheckFrames(); err != nil {
		t.Error(err)
	}
}

// TestFrameFromAnotherUMEM: a frame of one socket's private UMEM handed to
// another socket (with a UMEM of its own) is refused, even where the other
// socket holds a frame at the same offset of its own UMEM, which stays held.
func TestFrameFromAnotherUMEM(t *testing.T) {
	e := newEnv(t, 2, xsk.RedirectOptions{})
	s0 := e.open(t, xsk.Options{Queue: 0})
	s1 := e.open(t, xsk.Options{Queue: 1})
	f0, f1 := make([]xsk.Frame, 1), make([]xsk.Frame, 1)
	if s0.Alloc(f0) != 1 || s1.Alloc(f1) != 1 {
		t.Fatal("Alloc found no free frame")
	}
	if f0[0].Addr() != f1[0].Addr() {
		t.Fatalf("the two fresh sockets handed out frames at %#x and %#x: the test needs the same offset", f0[0].Addr(), f1[0].Addr())
	}
	if err := s1.Release(f0); !errors.Is(err, xsk.ErrInvalidFrame) {
		t.Errorf("Release on socket 1 of a frame of socket 0's UMEM: %v, want ErrInvalidFrame", err)
	}
	if _, err := s1.Transmit(f0); !errors.Is(err, xsk.ErrInvalidFrame) {
		t.Errorf("Transmit on socket 1 of a frame of socket 0's UMEM: %v, want ErrInvalidFrame", err)
	}
	if a := s1.Accounting(); a.Held != 1 {
		t.Errorf("socket 1 holds %d frames, want 1 (its own)", a.Held)
	}
	if err := s1.Release(f1); err != nil {
		t.Errorf("Release of socket 1's own frame: %v", err)
	}
	if err := s0.Release(f0); err != nil {
		t.Errorf("Release of socket 0's frame on socket 0: %v", err)
	}
	for _, s := range []*xsk.Socket{s0, s1} {
		if err := s.CheckFrames(); err != nil {
			t.Error(err)
		}
	}
}

// TestRingSizesReachTheKernel opens a socket with four different ring
// sizes and checks them where the kernel keeps them: a mapping of each
// ring as long as asked works, one twice as long is refused (the kernel
// checks a mapping against the ring it allocated), and Rings reports them.
func TestRingSizesReachTheKernel(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	sizes := map[string]int{"fill": 4096, "completion": 1024, "rx": 512, "tx": 256}
	s := e.open(t, xsk.Options{FillSize: sizes["fill"], CompletionSize: sizes["completion"], RxSize: sizes["rx"], TxSize: sizes["tx"],
		Frames: 6000, UMEMOptions: xsk.UMEMOptions{FrameCount: 8192}})
	if got, want := s.Rings(), (xsk.Rings{Fill: 4096, Completion: 1024, RX: 512, TX: 256, Frames: 6000}); got != want {
		t.Fatalf("Rings() = %+v, want %+v", got, want)
	}
	for name, n := range sizes {
		if err := xsk.MapRing(s, name, n); err != nil {
			t.Errorf("%s ring of %d entries: %v", name, n, err)
		}
		if err := xsk.MapRing(s, name, 2*n); !errors.Is(err, unix.EINVAL) {
			t.Errorf("%s ring mapped as %d entries: %v, want EINVAL (the kernel's ring is shorter)", name, 2*n, err)
		}
	}
	if got := s.Accounting().Fill; got != 4096 {
		t.Errorf("%d frames lent to the kernel, want a full fill ring of 4096", got)
	}
}

// TestPollModePollsEveryBatch: poll mode makes a poll() before every batch
// (xdpsock -p's loop), whether frames were waiting or not, and receives
// every frame sent; frames already on the ring are taken without
// sleeping.
func TestPollModePollsEveryBatch(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	s := e.open(t, xsk.Options{Queue: 0, Wait: xsk.WaitPoll, FillSize: 4096, RxSize: 4096, Frames: 4096, UMEMOptions: xsk.UMEMOptions{FrameCount: 4096}})
	// 3000 frames wait on the ring before the loop starts: it must drain
	// them batch by batch, each after a poll() that finds them.
	e.send(t, 0, 3000, e.udp(1, 2, 3, 20))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := xsk.RxDrop(ctx, s, xsk.ModeOptions{Frames: 3000}); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stats()
	if st.RxFrames < 3000 {
		t.Fatalf("received %d of 3000 frames", st.RxFrames)
	}
	if st.Polls < st.RxBatches {
		t.Errorf("%d polls for %d batches: poll mode polls before every batch", st.Polls, st.RxBatches)
	}
	if st.RxBatches < 3000/64 {
		t.Errorf("%d batches for 3000 frames: more than 64 per batch", st.RxBatches)
	}

	// Frames that come while the loop waits on an empty ring (in the raw
	// poll() first, then the blocking one) are received too.
	sent := e.sendAsync(0, 3000, e.udp(1, 2, 3, 20))
	if err := xsk.RxDrop(ctx, s, xsk.ModeOptions{Frames: 3000}); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	st2, _ := s.Stats()
	if st2.RxFrames-st.RxFrames < 3000 {
		t.Errorf("received %d of 3000 frames sent while waiting", st2.RxFrames-st.RxFrames)
	}

	// An idle socket goes on from the raw wait to the runtime's blocking
	// poll() within about 50ms, and a cancel still stops Run at once.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	start := time.Now()
	if err := xsk.RxDrop(ctx2, s, xsk.ModeOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Run took %v to stop after a 300ms context", d)
	}
	if st3, _ := s.Stats(); st3.BlockingPolls == st2.BlockingPolls {
		t.Errorf("no blocking poll() in 300ms without traffic: an idle socket must sleep the ordinary way")
	}
}

// TestRxDropRecycles checks RxDrop's loop, which hands RX descriptors
// straight back to the fill ring without making Frames: in each wait mode
// every frame received is counted as received and released, none stays
// held or goes missing (the debug checks see each one come back from the
// fill ring), the limit stops it within one batch, and the socket then
// receives with a handler as before.
func TestRxDropRecycles(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	for _, w := range []xsk.WaitMode{xsk.WaitSpin, xsk.WaitPoll, xsk.WaitAdaptive} {
		t.Run(w.String(), func(t *testing.T) {
			s := e.open(t, xsk.Options{Queue: 0, Wait: w, Batch: 64, UMEMOptions: xsk.UMEMOptions{Debug: true}})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			frame := e.udp(1, 2, 3, 60)
			size := uint64(len(frame))
			before, _ := s.Stats()
			sent := e.sendAsync(0, 5000, frame)
			if err := xsk.RxDrop(ctx, s, xsk.ModeOptions{Frames: 2000}); err != nil {
				t.Fatal(err)
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			st, _ := s.Stats()
			rx := st.RxFrames - before.RxFrames
			if rx < 2000 || rx >= 2000+64 {
				t.Errorf("RxDrop with a limit of 2000 took %d frames: want 2000 to 2063 (it stops within a batch)", rx)
			}
			if rel := st.Released - before.Released; rel != rx {
				t.Errorf("%d frames received but %d released", rx, rel)
			}
			if b := st.RxBytes - before.RxBytes; b != rx*size {
				t.Errorf("%d bytes counted for %d frames of %d bytes", b, rx, size)
			}
			if a := s.Accounting(); a.Held != 0 || a.TX != 0 {
				t.Errorf("after RxDrop: %+v, want nothing held or on TX", a)
			}
			if err := s.CheckFrames(); err != nil {
				t.Error(err)
			}

			// The recycled frames are received again, through a handler.
			var got uint64
			sent = e.sendAsync(0, 3000, frame)
			err := s.Run(ctx, func(frames []xsk.Frame, _ []xsk.Verdict) error {
				for _, f := range frames {
					if !bytes.Equal(f.Data, frame) {
						return fmt.Errorf("received %d bytes, not the %d sent", len(f.Data), len(frame))
					}
				}
				if got += uint64(len(frames)); got >= 1000 {
					return errStop
				}
				return nil
			})
			if !errors.Is(err, errStop) {
				t.Fatalf("Run after RxDrop: %v", err)
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			if err := s.CheckFrames(); err != nil {
				t.Error(err)
			}
		})
	}
}

var errStop = errors.New("stop")

// TestRxOnly: a socket opened with RxOnly has no TX ring in the kernel
// (mapping one fails), owns FillSize frames by default, receives and
// recycles as any other, and refuses to send: Transmit, TxOnly, L2Fwd and
// a Transmit verdict fail with ErrInvalidOptions, leaving no frame held.
func TestRxOnly(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	// Rings big enough to take each burst below whole.
	s := e.open(t, xsk.Options{Queue: 0, RxOnly: true, FillSize: 4096, RxSize: 4096, Wait: xsk.WaitPoll, UMEMOptions: xsk.UMEMOptions{Debug: true}})
	if got, want := s.Rings(), (xsk.Rings{Fill: 4096, Completion: xsk.DefaultRingSize, RX: 4096, Frames: 4096}); got != want {
		t.Fatalf("Rings() = %+v, want %+v", got, want)
	}
	if err := xsk.MapRing(s, "tx", 64); !errors.Is(err, unix.EINVAL) {
		t.Errorf("mapping a TX ring of a receive-only socket: %v, want EINVAL (the kernel has none)", err)
	}
	for _, r := range []string{"fill", "completion", "rx"} {
		if err := xsk.MapRing(s, r, 1024); err != nil {
			t.Errorf("%s ring: %v", r, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	frame := e.udp(1, 2, 3, 60)
	sent := e.sendAsync(0, 3000, frame)
	if err := xsk.RxDrop(ctx, s, xsk.ModeOptions{Frames: 2000}); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats(); st.RxFrames < 2000 {
		t.Fatalf("received %d of at least 2000 frames", st.RxFrames)
	}

	if _, err := s.Transmit(nil); !errors.Is(err, xsk.ErrInvalidOptions) || !strings.Contains(err.Error(), "receive-only") {
		t.Errorf("Transmit on a receive-only socket: %v, want ErrInvalidOptions saying why", err)
	}
	if err := xsk.TxOnly(ctx, s, frame, xsk.ModeOptions{Frames: 1}); !errors.Is(err, xsk.ErrInvalidOptions) {
		t.Errorf("TxOnly on a receive-only socket: %v, want ErrInvalidOptions", err)
	}
	if err := xsk.L2Fwd(ctx, s, xsk.ModeOptions{Frames: 1}); !errors.Is(err, xsk.ErrInvalidOptions) {
		t.Errorf("L2Fwd on a receive-only socket: %v, want ErrInvalidOptions", err)
	}
	sent = e.sendAsync(0, 100, frame)
	err := s.Run(ctx, func(_ []xsk.Frame, v []xsk.Verdict) error {
		for i := range v {
			v[i] = xsk.Transmit
		}
		return nil
	})
	if !errors.Is(err, xsk.ErrInvalidOptions) {
		t.Errorf("Run whose handler transmits, on a receive-only socket: %v, want ErrInvalidOptions", err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if a := s.Accounting(); a.Held != 0 || a.TX != 0 || a.TxRing != 0 {
		t.Errorf("after the refused transmit: %+v, want nothing held or on TX", a)
	}
	if err := s.CheckFrames(); err != nil {
		t.Error(err)
	}
}

// TestPollModeStopsDuringRawWait: poll mode's raw wait on an empty ring
// watches the socket alone (no eventfd), so a stop is seen when that wait
// ends: a cancel or Close during it still returns Run within the wait's
// bound (50ms, less once the runtime's preemption signal cuts it short),
// not only once a frame comes.
func TestPollModeStopsDuringRawWait(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	s := e.open(t, xsk.Options{Queue: 0, Wait: xsk.WaitPoll, RxOnly: true})
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- xsk.RxDrop(ctx, s, xsk.ModeOptions{}) }()
		time.Sleep(10 * time.Millisecond) // in the raw wait by now
		start := time.Now()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 500*time.Millisecond {
				t.Errorf("Run took %v to stop after a cancel in the raw wait", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not stop after a cancel in the raw wait")
		}
	}
	if st, _ := s.Stats(); st.BlockingPolls != 0 {
		t.Errorf("%d blocking polls: each Run was stopped within its raw wait", st.BlockingPolls)
	}
	done := make(chan error, 1)
	go func() { done <- xsk.RxDrop(context.Background(), s, xsk.ModeOptions{}) }()
	time.Sleep(10 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after Close in the raw wait")
	}
}

package asavie

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

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/pktgen"
)

// The harness matches xsk's own benchmarks: a one-queue veth pair, the
// live-frames generator in a child process on CPU 0 sending 64-byte UDP
// frames from the peer, and the consumer under test pinned to CPU 1.

const (
	genCPU      = 0
	consumerCPU = 1
	genEnv      = "XSK_ASAVIE_GENERATOR"
)

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

func runGenerator(job string) error {
	var ns, hexFrame string
	var ifindex, cpu int
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
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	_, err = g.Run(ctx, ifindex, frame, pktgen.RunOptions{Batch: 256})
	return err
}

type env struct {
	veth *testenv.Veth
}

func newEnv(tb testing.TB) *env {
	tb.Helper()
	if runtime.NumCPU() < 2 {
		testenv.SkipOrFail(tb, "needs 2 CPUs (have %d)", runtime.NumCPU())
	}
	v := testenv.NewVeth(tb, testenv.VethOptions{Queues: 1})
	if err := v.InPeerNS(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/"+v.PeerName+"/disable_ipv6", []byte("1"), 0)
	}); err != nil {
		tb.Fatal(err)
	}
	return &env{veth: v}
}

// frame is a 60-byte UDP frame from the peer to the host end (64 on the
// wire with the FCS).
func (e *env) frame() []byte {
	spec := frames.Spec{
		Src: netip.MustParseAddr("198.18.0.2"), Dst: netip.MustParseAddr("198.18.0.1"),
		Proto: frames.ProtoUDP, SrcPort: 1000, DstPort: 2000, Payload: frames.Pattern(18),
	}
	copy(spec.DstMAC[:], e.veth.MAC)
	copy(spec.SrcMAC[:], e.veth.PeerMAC)
	return spec.Build().Bytes
}

// generate runs the generator in a child process until stop is called.
func (e *env) generate(tb testing.TB) (stop func()) {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %x", genEnv, e.veth.NSName, e.veth.PeerIndex, genCPU, e.frame()))
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // let it start
	return func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			tb.Errorf("generator: %v: %s", err, stderr.String())
		}
	}
}

// dropAtPeer attaches a native program to the peer that counts and drops
// the frames the socket sends (txonly, l2fwd), and returns a function that
// reads that count: frames that really made it out.
func (e *env) dropAtPeer(tb testing.TB) (arrived func() uint64) {
	spec, err := gen.LoadBasic()
	if err != nil {
		tb.Fatal(err)
	}
	if err := spec.Variables[gen.BasicVarCountVerdict].Set(uint32(gen.BasicVerdictVERDICT_DROP)); err != nil {
		tb.Fatal(err)
	}
	var objs gen.BasicObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { objs.Close() })
	if err := e.veth.InPeerNS(func() error {
		l, err := link.AttachXDP(link.XDPOptions{Program: objs.XdpCount, Interface: e.veth.PeerIndex, Flags: link.XDPDriverMode})
		if err == nil {
			tb.Cleanup(func() { l.Close() })
		}
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return func() uint64 {
		var per []gen.BasicCounter
		if err := objs.Verdicts.Lookup(uint32(gen.BasicVerdictVERDICT_DROP), &per); err != nil {
			tb.Fatal(err)
		}
		var n uint64
		for _, c := range per {
			n += c.Packets
		}
		return n
	}
}

// pin locks the goroutine to a thread on cpu.
func pin(tb testing.TB, cpu int) func() {
	runtime.LockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		tb.Fatal(err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		tb.Fatal(err)
	}
	return func() {
		unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	}
}

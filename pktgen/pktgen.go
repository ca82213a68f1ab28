package pktgen

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/gen"
)

// Options configure a Generator.
type Options struct {
	// Flows > 1 varies the low 16 bits of the IPv4 source address, and the
	// UDP/TCP source port, over Flows values (at most 65536), so receive
	// side scaling and per-source rules see many flows.
	Flows uint32
	// IPOffset is the offset of the IPv4 header in the frames sent
	// (default 14, an untagged Ethernet frame).
	IPOffset uint32
	// L4Offset is the offset of the UDP or TCP header (default 34; it must
	// follow an IPv4 header without options unless set explicitly).
	L4Offset uint32
	// L4Checksum is the offset of the checksum inside the L4 header: 6 for
	// UDP, 16 for TCP, 0 to leave it alone. With Flows > 1 the generator
	// fixes it up for the changed source address and port.
	L4Checksum uint32
}

// Generator transmits frames with the live-frames test run.
type Generator struct {
	objs gen.BasicObjects
	// holds are the holding runs that Run stopped but that had not yet
	// left the kernel when it returned (holder.stop): Close waits for
	// them, so that none enters a run with a closed program.
	holds sync.WaitGroup
	// holdLeft, when set (tests only), is called as a holding run's
	// thread leaves, which it can delay.
	holdLeft func()
}

// xdpMD mirrors struct xdp_md, the context of an XDP test run.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// New loads the generator program.
func New(opts Options) (*Generator, error) {
	if opts.Flows == 0 {
		opts.Flows = 1
	}
	if opts.Flows > 65536 {
		return nil, fmt.Errorf("pktgen: %d flows: at most 65536", opts.Flows)
	}
	if opts.IPOffset == 0 {
		opts.IPOffset = 14
	}
	if opts.L4Offset == 0 {
		opts.L4Offset = opts.IPOffset + 20
	}
	spec, err := gen.LoadBasic()
	if err != nil {
		return nil, fmt.Errorf("pktgen: %w", err)
	}
	for name, v := range map[string]uint32{
		gen.BasicVarGenFlows:  opts.Flows,
		gen.BasicVarGenIpOff:  opts.IPOffset,
		gen.BasicVarGenL4Off:  opts.L4Offset,
		gen.BasicVarGenL4Csum: opts.L4Checksum,
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("pktgen: set %s: %w", name, err)
		}
	}
	g := &Generator{}
	// Load only what the generator uses.
	var objs struct {
		Prog *ebpf.Program  `ebpf:"xdp_gen"`
		Seq  *ebpf.Map      `ebpf:"gen_seq"`
		Sent *ebpf.Variable `ebpf:"gen_sent"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, fmt.Errorf("pktgen: load generator: %w", err)
	}
	g.objs.XdpGen = objs.Prog
	g.objs.GenSeq = objs.Seq
	g.objs.GenSent = objs.Sent
	return g, nil
}

// Send transmits frame count times out of interface ifindex (which must be
// in the calling thread's namespace), batch frames per kernel iteration
// (0 means the kernel default of 64). It returns how many runs the kernel
// completed; frames lost downstream are not seen here.
func (g *Generator) Send(ifindex int, frame []byte, count, batch uint32) (uint32, error) {
	if len(frame) < 14 {
		return 0, errors.New("pktgen: frame shorter than an Ethernet header")
	}
	if count == 0 {
		return 0, nil
	}
	ctx := xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifindex)}
	opts := &ebpf.RunOptions{
		Data:      frame,
		Context:   &ctx,
		Repeat:    count,
		Flags:     unix.BPF_F_TEST_XDP_LIVE_FRAMES,
		BatchSize: batch,
	}
	if _, err := g.objs.XdpGen.Run(opts); err != nil {
		return 0, fmt.Errorf("pktgen: live-frames run on ifindex %d: %w", ifindex, err)
	}
	return count, nil
}

// Close releases the program and its map.
func (g *Generator) Close() error {
	g.holds.Wait()
	return g.objs.Close()
}

package pktgen

import "github.com/cilium/ebpf"

// ProgramForTest exposes the generator program to tests, which run it without
// live frames to see the frame it rewrote.
func ProgramForTest(g *Generator) *ebpf.Program { return g.objs.XdpGen }

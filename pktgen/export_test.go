package pktgen

import (
	"time"

	"github.com/cilium/ebpf"
)

// ProgramForTest exposes the generator program to tests, which run it without
// live frames to see the frame it rewrote.
func ProgramForTest(g *Generator) *ebpf.Program { return g.objs.XdpGen }

// DelayHoldExit makes every holding run's thread wait d as it leaves, as a
// slow RCU grace period makes it wait on a loaded machine.
func DelayHoldExit(g *Generator, d time.Duration) { g.holdLeft = func() { time.Sleep(d) } }

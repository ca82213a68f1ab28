package benchmark

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/xsk"
)

// xdpsockOutput is what xdpsock -x -a prints: two blocks, the second
// with thousands separators (a locale with grouping).
const xdpsockOutput = `
 sock0@veth0:0 rxdrop xdp-drv 
                   pps            pkts           1.00          
rx                 100            100           
tx                 0              0             
rx dropped         1              1             
rx invalid         0              0             
tx invalid         0              0             
rx queue full      2              2             
fill ring empty    3              3             
tx ring empty      0              0             

                   calls/s        count         
rx empty polls     4              4             
fill fail polls    0              0             
copy tx sendtos    0              0             
tx wakeup sendtos  0              0             
opt polls          5              5             

 sock0@veth0:0 rxdrop xdp-drv 
                   pps            pkts           1.00          
rx                 5,306,385      26,531,925    
tx                 7              8             
rx dropped         0              1,200         
rx invalid         0              0             
tx invalid         0              9             
rx queue full      0              3,400         
fill ring empty    0              10            
tx ring empty      0              0             

                   calls/s        count         
rx empty polls     0              40            
fill fail polls    0              1             
copy tx sendtos    0              2             
tx wakeup sendtos  0              3             
opt polls          0              50            
`

// TestParseXDPSock reads the totals of the last block.
func TestParseXDPSock(t *testing.T) {
	st := parseXDPSock(xdpsockOutput)
	require.Equal(t, xdpsockStats{rx: 26531925, tx: 8, rxDropped: 1200, rxQueueFull: 3400, fillRingEmpty: 10, txInvalid: 9,
		syscalls: 40 + 1 + 2 + 3 + 50, blocks: 2}, st)
	require.Equal(t, xdpsockStats{}, parseXDPSock(""), "nothing printed yet")
	require.Equal(t, uint64(100), parseXDPSock(xdpsockOutput[:len(xdpsockOutput)/2]).rx, "the first block alone")
}

// TestXDPSockArgs: the arguments say what the row measures.
func TestXDPSockArgs(t *testing.T) {
	o := DefaultOptions()
	c := Case{Kind: RxDrop, FrameSize: 64, Placement: OneCore, NeedWakeup: true, App: AppXDPSock}
	require.Equal(t, []string{"-i", "xdb0", "-q", "0", "-N", "-c", "-b", "64", "-x", "-a", "-r"}, xdpsockArgs(c, o, "xdb0"))
	c.Kind, c.NeedWakeup = L2Fwd, false
	o.Wait, o.Batch = xsk.WaitPoll, 32
	require.Equal(t, []string{"-i", "xdb0", "-q", "0", "-N", "-c", "-b", "32", "-x", "-a", "-l", "-m", "-p"}, xdpsockArgs(c, o, "xdb0"))
}

// TestXDPSockCases: the table and what a case of it may be.
func TestXDPSockCases(t *testing.T) {
	cs, err := Plan(PlanOptions{Tables: []string{TableDrop}, XDPSock: true})
	require.NoError(t, err)
	var names []string
	for _, c := range cs {
		if c.Table == TableXDPSock {
			names = append(names, c.Name())
		}
	}
	require.Equal(t, []string{
		"rxdrop 64B one-core need_wakeup=on", "rxdrop 64B one-core need_wakeup=on xdpsock",
		"rxdrop 64B two-cores need_wakeup=on", "rxdrop 64B two-cores need_wakeup=on xdpsock",
		"l2fwd 64B one-core need_wakeup=on", "l2fwd 64B one-core need_wakeup=on xdpsock",
		"l2fwd 64B two-cores need_wakeup=on", "l2fwd 64B two-cores need_wakeup=on xdpsock",
	}, names)
	require.ErrorContains(t, Case{Kind: TxOnly, FrameSize: 64, Placement: OneCore, App: AppXDPSock}.Validate(), "xdpsock runs rxdrop and l2fwd rows only")
	require.ErrorContains(t, Case{Kind: RxDrop, FrameSize: 64, Placement: OneCore, App: "dpdk"}.Validate(), `app "dpdk"`)
	require.ErrorContains(t, checkExecutable(""), "need the path")
	require.ErrorContains(t, checkExecutable(t.TempDir()), "is not an executable file")
}

package benchmark

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestResultGeneratorBound: a row that took all the generator offered is
// flagged generator-bound with the generator's idle share; one that fell
// behind is not; txonly has no generator.
func TestResultGeneratorBound(t *testing.T) {
	rx := Case{Table: TableNeedWakeup, Kind: RxDrop, FrameSize: 64, Placement: TwoCores, NeedWakeup: true}
	r := &row{c: rx, veth: true, samples: []float64{5.0, 5.1, 4.9}, offered: []float64{5.0, 5.1, 5.0}, genIdle: []float64{40, 60, 50}}
	res := r.result()
	require.True(t, res.GeneratorBound)
	require.Contains(t, res.Note, "generator-bound")
	require.NotNil(t, res.GeneratorIdlePct)
	require.Equal(t, 50.0, *res.GeneratorIdlePct, "the median window")

	r = &row{c: rx, veth: true, samples: []float64{3.0}, offered: []float64{5.0}, genIdle: []float64{0}}
	res = r.result()
	require.False(t, res.GeneratorBound, "fell behind the generator")
	require.Empty(t, res.Note)
	require.Equal(t, 0.0, *res.GeneratorIdlePct)

	tx := Case{Table: TableNeedWakeup, Kind: TxOnly, FrameSize: 64, Placement: TwoCores}
	r = &row{c: tx, veth: true, samples: []float64{2.0}, offered: []float64{2.0}}
	res = r.result()
	require.False(t, res.GeneratorBound, "txonly's sender is the socket under test")
	require.Equal(t, "kept up with the sender", res.Note)
	require.Nil(t, res.GeneratorIdlePct)
}

// TestParseProcStat reads the machine's line and one CPU's.
func TestParseProcStat(t *testing.T) {
	stat := "cpu  100 0 50 800 10 5 5 30 0 0\n" +
		"cpu0 60 0 30 300 5 5 5 15 0 0\n" +
		"cpu1 40 0 20 500 5 0 0 15 0 0\n" +
		"intr 12345\n"
	busy, steal, total, idle, cpuTotal := parseProcStat(stat, 1)
	require.Equal(t, uint64(160), busy)
	require.Equal(t, uint64(30), steal)
	require.Equal(t, uint64(1000), total)
	require.Equal(t, uint64(505), idle, "idle + iowait of cpu1")
	require.Equal(t, uint64(580), cpuTotal)
	c := cpuTicks{genIdle: idle, genTotal: cpuTotal}
	require.InDelta(t, 87.07, c.genIdlePct(), 0.01)

	_, _, _, idle, cpuTotal = parseProcStat(stat, 7)
	require.Zero(t, idle+cpuTotal, "no such CPU")
	require.Equal(t, -1.0, cpuTicks{}.genIdlePct(), "unknown")
}

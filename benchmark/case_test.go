package benchmark_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/benchmark"
)

func TestPlanShape(t *testing.T) {
	cs, err := benchmark.Plan(benchmark.PlanOptions{})
	require.NoError(t, err)
	per := map[string]int{}
	for _, c := range cs {
		require.NoError(t, c.Validate(), c.Name())
		per[c.Table]++
	}
	// drop: tc, generic, native, fast drop 10k and 1M; need_wakeup: 3
	// modes x 2 placements x 2; busy_poll: off + 3 budgets; frame_size:
	// 3 modes x 2 sizes.
	require.Equal(t, map[string]int{
		benchmark.TableDrop: 5, benchmark.TableNeedWakeup: 12,
		benchmark.TableBusyPoll: 4, benchmark.TableFrameSize: 6,
	}, per)

	var fast []int
	for _, c := range cs {
		if c.Kind == benchmark.DropFast {
			fast = append(fast, c.Rules)
		}
		if c.Table == benchmark.TableBusyPoll {
			require.Equal(t, benchmark.RxDrop, c.Kind)
			require.Equal(t, benchmark.OneCore, c.Placement)
		}
	}
	require.Equal(t, []int{10_000, 1_000_000}, fast)

	cs, err = benchmark.Plan(benchmark.PlanOptions{Tables: []string{benchmark.TableFrameSize}, Sizes: []int{128, 512, 1024}})
	require.NoError(t, err)
	require.Len(t, cs, 9)
	require.Equal(t, 128, cs[0].FrameSize)

	_, err = benchmark.Plan(benchmark.PlanOptions{Tables: []string{"bogus"}})
	require.ErrorContains(t, err, `unknown table "bogus"`)
	_, err = benchmark.Plan(benchmark.PlanOptions{Sizes: []int{32}})
	require.ErrorContains(t, err, "frame size 32")
}

func TestCaseValidate(t *testing.T) {
	for _, tc := range []struct {
		c    benchmark.Case
		want string
	}{
		{benchmark.Case{Kind: "nope", FrameSize: 64}, `unknown kind "nope"`},
		{benchmark.Case{Kind: benchmark.DropNative, FrameSize: 20}, "frame size 20"},
		{benchmark.Case{Kind: benchmark.DropFast, FrameSize: 64}, "at least 1 rule"},
		{benchmark.Case{Kind: benchmark.DropNative, FrameSize: 64, Rules: 5}, "rules are for fastdrop only"},
		{benchmark.Case{Kind: benchmark.RxDrop, FrameSize: 64}, `placement ""`},
		{benchmark.Case{Kind: benchmark.DropTC, FrameSize: 64, NeedWakeup: true}, "for AF_XDP kinds"},
		{benchmark.Case{Kind: benchmark.TxOnly, FrameSize: 64, Placement: benchmark.OneCore, BusyPollBudget: 64}, "for rxdrop only"},
		{benchmark.Case{Kind: benchmark.RxDrop, FrameSize: 64, Placement: benchmark.OneCore, BusyPollBudget: 70000}, "budget 70000"},
	} {
		require.ErrorContains(t, tc.c.Validate(), tc.want, "%+v", tc.c)
	}
	ok := benchmark.Case{Kind: benchmark.RxDrop, FrameSize: 1500, Placement: benchmark.TwoCores, NeedWakeup: true, BusyPollBudget: 256}
	require.NoError(t, ok.Validate())
	require.Equal(t, "rxdrop 1500B two-cores need_wakeup=on busy_poll=256", ok.Name())
	require.Equal(t, "fastdrop 1M rules 64B", benchmark.Case{Kind: benchmark.DropFast, FrameSize: 64, Rules: 1_000_000}.Name())
}

func TestSummarize(t *testing.T) {
	require.Equal(t, benchmark.Summary{}, benchmark.Summarize(nil))
	s := benchmark.Summarize([]float64{3, 1, 2})
	require.Equal(t, 2.0, s.Median)
	require.Equal(t, 1.0, s.Min)
	require.Equal(t, 3.0, s.Max)
	require.InDelta(t, 100, s.SpreadPct, 1e-9)
	s = benchmark.Summarize([]float64{4, 1, 2, 3})
	require.Equal(t, 2.5, s.Median)
	require.Equal(t, 0.0, benchmark.Summarize([]float64{0, 0}).SpreadPct)
}

func TestDescribeMachine(t *testing.T) {
	m := benchmark.DescribeMachine()
	require.Positive(t, m.CPUs)
	require.NotEmpty(t, m.Kernel)
	require.NotEmpty(t, m.Arch)
	require.Contains(t, m.String(), "Linux "+m.Kernel)
}

func TestLossCauses(t *testing.T) {
	for _, c := range []benchmark.Cause{
		benchmark.LossVethRingFull, benchmark.LossPassed, benchmark.LossToStack, benchmark.LossRxRingFull,
		benchmark.LossRxDropped, benchmark.LossAppTxDropped, benchmark.LossTxInvalid, benchmark.LossVethTxDropped,
		benchmark.LossNotSentBack, benchmark.LossLeftOnRing,
	} {
		require.NotEqual(t, string(c), c.Describe(), "%s needs a description", c)
	}
}

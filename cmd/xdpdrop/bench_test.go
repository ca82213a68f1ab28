package main

import (
	"strings"
	"testing"

	"github.com/xdpdrop/xdpdrop/benchmark"
)

// benchReport is a report with one generator-bound rxdrop row, one that
// fell behind, and a txonly row (no generator).
func benchReport() *benchmark.Report {
	idle50, idle0 := 50.0, 0.0
	rx := benchmark.Case{Table: benchmark.TableNeedWakeup, Kind: benchmark.RxDrop, FrameSize: 64, Placement: benchmark.TwoCores, NeedWakeup: true}
	rx1 := rx
	rx1.Placement = benchmark.OneCore
	tx := benchmark.Case{Table: benchmark.TableNeedWakeup, Kind: benchmark.TxOnly, FrameSize: 64, Placement: benchmark.TwoCores, NeedWakeup: true}
	sum := func(m float64) benchmark.Summary { return benchmark.Summary{Median: m, Min: m, Max: m} }
	return &benchmark.Report{
		Settings: benchmark.Settings{Repeat: 1, CPUs: []int{0, 1}, Flows: 1, Wait: "spin", Batch: 64, Generator: "test", Interfaces: "sandbox"},
		Results: []benchmark.Result{
			{Case: rx, Name: rx.Name(), Mpps: sum(5), OfferedMpps: sum(5), GeneratorIdlePct: &idle50, GeneratorBound: true,
				Sent: 100, Received: 100, Note: "generator-bound: took all the generator offered, so the rate is the generator's"},
			{Case: rx1, Name: rx1.Name(), Mpps: sum(3), OfferedMpps: sum(5), GeneratorIdlePct: &idle0, Sent: 100, Received: 60,
				Lost: []benchmark.Loss{{Cause: benchmark.LossRxDropped, Frames: 40}}},
			{Case: tx, Name: tx.Name(), Mpps: sum(2), OfferedMpps: sum(2), Sent: 100, Received: 100, Note: "kept up with the sender"},
		},
	}
}

// TestBenchMarkdownGenerator: the Markdown report shows the generator's
// idle share per row and marks generator-bound rows.
func TestBenchMarkdownGenerator(t *testing.T) {
	var b strings.Builder
	if err := writeBenchMarkdown(&b, "xdpdrop bench", benchReport()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| | Mpps | range (spread) | offered Mpps | gen idle | syscalls/frame | sent | received | lost | other CPU |",
		"| rxdrop, two cores, need_wakeup on | **5.00** † | 5.00–5.00 (0%) | 5.00 | 50% | 0.000 |",
		"| rxdrop, one core, need_wakeup on | **3.00** | 3.00–3.00 (0%) | 5.00 | 0% | 0.000 |",
		"| txonly, two cores, need_wakeup on | **2.00** | 2.00–2.00 (0%) | 2.00 | — | 0.000 |",
		"_generator-bound: took all the generator offered",
		"**gen idle** the share of the generator's CPU's time",
		"rows marked † took everything the generator offered",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

// TestBenchMarkdownXDPSock: the xdpsock table labels the Go and the C
// rows and shows xdpsock's own count next to what its socket received.
func TestBenchMarkdownXDPSock(t *testing.T) {
	sum := func(m float64) benchmark.Summary { return benchmark.Summary{Median: m, Min: m, Max: m} }
	goRow := benchmark.Case{Table: benchmark.TableXDPSock, Kind: benchmark.RxDrop, FrameSize: 64, Placement: benchmark.OneCore, NeedWakeup: true}
	cRow := goRow
	cRow.App = benchmark.AppXDPSock
	rep := &benchmark.Report{
		Settings: benchmark.Settings{Repeat: 1, CPUs: []int{0, 1}, Flows: 1, Wait: "spin", Batch: 64, Generator: "test", Interfaces: "sandbox"},
		Results: []benchmark.Result{
			{Case: goRow, Name: goRow.Name(), Mpps: sum(4), OfferedMpps: sum(5), Sent: 100, Received: 80},
			{Case: cRow, Name: cRow.Name(), Mpps: sum(3), OfferedMpps: sum(5), Sent: 100, Received: 60, AppReceived: 59},
		},
	}
	var b strings.Builder
	if err := writeBenchMarkdown(&b, "xdpdrop bench", rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"### AF_XDP against xdpsock: package xsk (Go) and xdpsock (C) side by side, need_wakeup on (64-byte frames)",
		"| rxdrop, one core, xsk (Go) | **4.00** |",
		"| rxdrop, one core, xdpsock (C) | **3.00** |",
		"| 100 | 60 (xdpsock says 59) |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

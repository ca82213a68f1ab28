package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/fastdrop"
)

// testFrame is one frame in `xdpdrop test --json`.
type testFrame struct {
	Index     int       `json:"index"` // 1-based, as in Wireshark
	Time      time.Time `json:"time"`
	Length    int       `json:"length"`
	Verdict   string    `json:"verdict"`              // drop or pass; "" when skipped
	Class     string    `json:"class"`                // compound, prefix, default, malformed, skipped
	RuleIndex int       `json:"rule_index,omitempty"` // 1-based position in the rule set, 0: none
	Rule      string    `json:"rule,omitempty"`
	Line      int       `json:"line,omitempty"`  // the rule's line in the rules file
	Error     string    `json:"error,omitempty"` // why it was skipped
}

// testSummary is the summary of `xdpdrop test --json`.
type testSummary struct {
	Frames    int            `json:"frames"`
	Dropped   int            `json:"dropped"`
	Passed    int            `json:"passed"`
	Malformed int            `json:"malformed"`
	Default   int            `json:"default"`
	Skipped   int            `json:"skipped"`
	Rules     []testRuleHits `json:"rules"` // every rule, in rule-set order
}

type testRuleHits struct {
	Index  int    `json:"index"` // 1-based
	Rule   string `json:"rule"`
	Frames int    `json:"frames"`
}

type testReport struct {
	Rules   string      `json:"rules"`
	Capture string      `json:"capture"`
	Frames  []testFrame `json:"frames,omitempty"`
	Summary testSummary `json:"summary"`
}

func (a *app) testCmd() *cobra.Command {
	var rules, capture string
	var jsonOut, summaryOnly bool
	cmd := &cobra.Command{
		Use:   "test --rules FILE --pcap FILE [--json]",
		Short: "Check a rule set against a capture: every frame's verdict and matching rule",
		Long: `test compiles the rule set into the exact fast-drop program and maps that
'xdpdrop drop' would attach, runs every frame of a capture (pcap or pcapng,
Ethernet, as tcpdump -w or Wireshark save it) through it in the kernel with
BPF_PROG_TEST_RUN, and prints each frame's verdict and the rule that decided,
then a summary per verdict and per rule. No interface is touched: use it to
check a rule set against yesterday's traffic before it goes live.

Frames shorter than an Ethernet header are reported as skipped.`,
		Example: `  xdpdrop test --rules attack.rules --pcap yesterday.pcap
  xdpdrop test --rules attack.rules --pcap big.pcapng --summary
  xdpdrop test --rules attack.rules --pcap sample.pcap --json | jq '.summary'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.test(rules, capture, jsonOut, summaryOnly)
		},
	}
	cmd.Flags().StringVar(&rules, "rules", "", "rule file (required)")
	cmd.Flags().StringVar(&capture, "pcap", "", "capture file, pcap or pcapng (required)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&summaryOnly, "summary", false, "print only the summary, not every frame")
	_ = cmd.MarkFlagRequired("rules")
	_ = cmd.MarkFlagRequired("pcap")
	return cmd
}

// openCapture opens a pcap or pcapng file of Ethernet frames.
func openCapture(path string) (next func() ([]byte, time.Time, int, error), closer io.Closer, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--pcap: %w", err)
	}
	br := bufio.NewReaderSize(f, 1<<20)
	magic, err := br.Peek(4)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("--pcap %s: not a pcap or pcapng file (too short)", path)
	}
	var link layers.LinkType
	if bytes.Equal(magic, []byte{0x0a, 0x0d, 0x0d, 0x0a}) {
		r, err := pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("--pcap %s: %w", path, err)
		}
		link = r.LinkType()
		next = func() ([]byte, time.Time, int, error) {
			data, ci, err := r.ReadPacketData()
			return data, ci.Timestamp, ci.Length, err
		}
	} else {
		r, err := pcapgo.NewReader(br)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("--pcap %s: not a pcap or pcapng file: %w", path, err)
		}
		link = r.LinkType()
		next = func() ([]byte, time.Time, int, error) {
			data, ci, err := r.ReadPacketData()
			return data, ci.Timestamp, ci.Length, err
		}
	}
	if link != layers.LinkTypeEthernet {
		f.Close()
		return nil, nil, fmt.Errorf("--pcap %s: link type %s: want Ethernet (capture on one interface, e.g. tcpdump -i eth3 -w FILE, not -i any)", path, link)
	}
	return next, f, nil
}

func (a *app) test(rulesPath, capture string, jsonOut, summaryOnly bool) error {
	rs, err := fastdrop.ParseFile(rulesPath)
	if err != nil {
		return err
	}
	next, closer, err := openCapture(capture)
	if err != nil {
		return err
	}
	defer closer.Close()
	tester, err := fastdrop.NewTester(rs)
	if err != nil {
		return err
	}
	defer tester.Close()

	rep := testReport{Rules: rulesPath, Capture: capture}
	hits := make([]int, len(rs.Rules))
	perFrame := !jsonOut && !summaryOnly
	tw := table(a.stdout)
	if perFrame {
		fmt.Fprintln(tw, "#\tTIME\tLEN\tVERDICT\tBY\tRULE")
	}
	for i := 1; ; i++ {
		data, ts, length, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("--pcap %s: frame %d: %w", capture, i, err)
		}
		fr := testFrame{Index: i, Time: ts, Length: length}
		res, err := tester.Test(data)
		switch {
		case errors.Is(err, fastdrop.ErrFrameSize):
			fr.Class, fr.Error = "skipped", err.Error()
			rep.Summary.Skipped++
		case err != nil:
			return fmt.Errorf("frame %d: %w", i, err)
		default:
			fr.Verdict, fr.Class = res.Verdict.String(), className(res.Class)
			if res.Verdict == fastdrop.ActionDrop {
				rep.Summary.Dropped++
			} else {
				rep.Summary.Passed++
			}
			switch res.Class {
			case fastdrop.ClassMalformed:
				rep.Summary.Malformed++
			case fastdrop.ClassDefault:
				rep.Summary.Default++
			}
			if res.Rule >= 0 {
				r := rs.Rules[res.Rule]
				fr.RuleIndex, fr.Rule, fr.Line = res.Rule+1, r.String(), r.Line
				hits[res.Rule]++
			}
		}
		rep.Summary.Frames++
		switch {
		case summaryOnly:
		case jsonOut:
			rep.Frames = append(rep.Frames, fr)
		default:
			rule := "-"
			if fr.Rule != "" {
				rule = fmt.Sprintf("#%d %s", fr.RuleIndex, fr.Rule)
			} else if fr.Error != "" {
				rule = fr.Error
			}
			verdict := fr.Verdict
			if verdict == "" {
				verdict = "-"
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", fr.Index, fr.Time.Format("15:04:05.000000"), fr.Length, verdict, fr.Class, rule)
		}
	}
	for i, r := range rs.Rules {
		rep.Summary.Rules = append(rep.Summary.Rules, testRuleHits{Index: i + 1, Rule: r.String(), Frames: hits[i]})
	}
	if jsonOut {
		return writeJSON(a.stdout, rep)
	}
	if perFrame {
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(a.stdout)
	}
	s := rep.Summary
	fmt.Fprintf(a.stdout, "%d frames: %d dropped, %d passed (%d malformed, %d by the default policy %s), %d skipped\n",
		s.Frames, s.Dropped, s.Passed, s.Malformed, s.Default, rs.EffectivePolicy(), s.Skipped)
	t := table(a.stdout)
	fmt.Fprintln(t, "#\tRULE\tFRAMES")
	for _, r := range s.Rules {
		fmt.Fprintf(t, "%d\t%s\t%d\n", r.Index, r.Rule, r.Frames)
	}
	return t.Flush()
}

func className(c fastdrop.ResultClass) string {
	switch c {
	case fastdrop.ClassMalformed:
		return "malformed"
	case fastdrop.ClassCompound:
		return "compound"
	case fastdrop.ClassPrefix:
		return "prefix"
	case fastdrop.ClassDefault:
		return "default"
	}
	return "unknown"
}

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/fastdrop"
)

// testFrame is one frame in `xdpdrop test --json`.
type testFrame struct {
	Index     int       `json:"index"` // 1-based record number, as in Wireshark
	Time      time.Time `json:"time"`
	Length    int       `json:"length"`                    // on the wire: what the program judges
	Captured  int       `json:"captured_length,omitempty"` // what the capture kept, when it cut the frame short
	Verdict   string    `json:"verdict"`                   // drop or pass; "" when skipped
	Class     string    `json:"class"`                     // compound, prefix, default, malformed, skipped
	RuleIndex int       `json:"rule_index,omitempty"`      // 1-based position in the rule set, 0: none
	Rule      string    `json:"rule,omitempty"`
	Line      int       `json:"line,omitempty"`  // the rule's line in the rules file
	Error     string    `json:"error,omitempty"` // why it was skipped
}

// testSummary is the summary of `xdpdrop test --json`.
type testSummary struct {
	Frames    int `json:"frames"`
	Dropped   int `json:"dropped"`
	Passed    int `json:"passed"`
	Malformed int `json:"malformed"`
	Default   int `json:"default"`
	Skipped   int `json:"skipped"`
	// Cut: frames the capture's snap length cut short. Those whose
	// headers were all captured are judged at their length on the wire
	// (padded); CutHeaders of them were cut inside their headers and
	// are skipped.
	Cut         int            `json:"cut"`
	CutHeaders  int            `json:"cut_in_headers"`
	NotEthernet int            `json:"not_ethernet"` // skipped: from a pcapng interface that is not Ethernet
	Rules       []testRuleHits `json:"rules"`        // every rule, in rule-set order
}

type testRuleHits struct {
	Index  int    `json:"index"` // 1-based
	Rule   string `json:"rule"`
	Frames int    `json:"frames"`
}

type testReport struct {
	Rules   string      `json:"rules"`
	Capture string      `json:"capture"`
	Frames  []testFrame `json:"frames,omitzero"` // every record; left out with --summary
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

Frames are numbered by their record in the file, as Wireshark numbers them.
A frame that the capture's snap length cut short (tcpdump -s 96) is judged
at its length on the wire: the verdict depends only on the headers and the
length, so the missing bytes are filled with zeros; a frame cut inside its
headers is skipped, since its verdict cannot be known. The summary says how
many frames were cut. Frames of a pcapng interface that is not Ethernet are
skipped and named. A frame shorter than an Ethernet header is malformed, as
docs/RULES.md says; jumbo frames are judged whole, as the attached program
judges them.

Limit rules are evaluated against the capture's own clock: the program's
clock is set to each frame's timestamp (relative to the first frame's)
before the frame runs, so the verdicts show which frames of the capture a
limit would have passed and which it would have dropped, and which
sources it would have banned. Every bucket starts full at the first frame.
As in the attached program, the limits see that clock in steps of the
kernel's tick (1/HZ: 4 ms at HZ=250, the resolution of the coarse
monotonic clock) counted from the first frame, and every bucket is a tick
deeper than its burst, so right after a step a limit may pass up to a
tick's worth of its rate more than its burst: the counts are the kernel's,
up to where its ticks fall.`,
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

// capRecord is one packet record of a capture.
type capRecord struct {
	data   []byte
	ts     time.Time
	length int    // on the wire; more than len(data) when the snap length cut it
	link   string // "" for Ethernet, else its interface and link type
}

// openCapture opens a pcap or pcapng file of Ethernet frames. A pcap file
// has one link type, refused unless Ethernet; a pcapng file may have
// interfaces of several, and each record says whether it is Ethernet.
func openCapture(path string) (next func() (capRecord, error), closer io.Closer, err error) {
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
	if bytes.Equal(magic, []byte{0x0a, 0x0d, 0x0d, 0x0a}) {
		opts := pcapgo.DefaultNgReaderOptions
		// Every record, whatever its interface's link type: otherwise
		// those of other interfaces than the first are left out without
		// a word, and the records after them renumbered.
		opts.WantMixedLinkType = true
		r, err := pcapgo.NewNgReader(br, opts)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("--pcap %s: %w", path, err)
		}
		next = func() (capRecord, error) {
			data, ci, err := r.ReadPacketData()
			if err != nil {
				return capRecord{}, err
			}
			rec := capRecord{data: data, ts: ci.Timestamp, length: ci.Length}
			var lt layers.LinkType
			if len(ci.AncillaryData) > 0 {
				lt, _ = ci.AncillaryData[0].(layers.LinkType)
			}
			if lt != layers.LinkTypeEthernet {
				name := ""
				if ifc, err := r.Interface(ci.InterfaceIndex); err == nil && ifc.Name != "" {
					name = " (" + ifc.Name + ")"
				}
				rec.link = fmt.Sprintf("interface %d%s has link type %s", ci.InterfaceIndex, name, lt)
			}
			return rec, nil
		}
		return next, f, nil
	}
	r, err := pcapgo.NewReader(br)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("--pcap %s: not a pcap or pcapng file: %w", path, err)
	}
	if link := r.LinkType(); link != layers.LinkTypeEthernet {
		f.Close()
		return nil, nil, notEthernet(path, "link type "+link.String())
	}
	next = func() (capRecord, error) {
		data, ci, err := r.ReadPacketData()
		return capRecord{data: data, ts: ci.Timestamp, length: ci.Length}, err
	}
	return next, f, nil
}

func notEthernet(path, what string) error {
	return fmt.Errorf("--pcap %s: %s: want Ethernet (capture on one interface, e.g. tcpdump -i eth3 -w FILE, not -i any)", path, what)
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
	if !summaryOnly {
		rep.Frames = []testFrame{} // an empty capture has an empty list
	}
	var firstLink string // the first record skipped as not Ethernet, and why
	hits := make([]int, len(rs.Rules))
	perFrame := !jsonOut && !summaryOnly
	tw := table(a.stdout)
	if perFrame {
		fmt.Fprintln(tw, "#\tTIME\tLEN\tVERDICT\tBY\tRULE")
	}
	for i := 1; ; i++ {
		rec, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("--pcap %s: frame %d: %w", capture, i, err)
		}
		fr := testFrame{Index: i, Time: rec.ts, Length: max(rec.length, len(rec.data))}
		cut := rec.length > len(rec.data)
		if cut {
			fr.Captured = len(rec.data)
		}
		var res fastdrop.Result
		if err := tester.SetTime(rec.ts); err != nil {
			return err
		}
		switch {
		case rec.link != "":
			err = errors.New("not Ethernet: " + rec.link)
			rep.Summary.NotEthernet++
			if firstLink == "" {
				firstLink = fmt.Sprintf("record %d: %s", i, rec.link)
			}
		case cut:
			rep.Summary.Cut++
			res, err = tester.TestCaptured(rec.data, rec.length)
		default:
			res, err = tester.Test(rec.data)
		}
		switch {
		case rec.link != "", errors.Is(err, fastdrop.ErrFrameSize), errors.Is(err, fastdrop.ErrCutHeaders):
			if errors.Is(err, fastdrop.ErrCutHeaders) {
				rep.Summary.CutHeaders++
			}
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
				fr.RuleIndex, fr.Rule, fr.Line = res.Rule+1, r.Written(), r.Line
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
			length := strconv.Itoa(fr.Length)
			if fr.Captured > 0 {
				length += fmt.Sprintf(" (%d captured)", fr.Captured)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", fr.Index, fr.Time.Format("15:04:05.000000"), length, verdict, fr.Class, rule)
		}
	}
	if rep.Summary.NotEthernet > 0 && rep.Summary.NotEthernet == rep.Summary.Frames {
		return notEthernet(capture, "no Ethernet frame in it ("+firstLink+")")
	}
	for i, r := range rs.Rules {
		rep.Summary.Rules = append(rep.Summary.Rules, testRuleHits{Index: i + 1, Rule: r.Written(), Frames: hits[i]})
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
	if s.Cut > 0 {
		fmt.Fprintf(a.stdout, "%d %s cut short by the capture's snap length: %d judged at their length on the wire (headers all captured, the rest filled with zeros), %d skipped (cut inside their headers)\n",
			s.Cut, plural(s.Cut, "frame was", "frames were"), s.Cut-s.CutHeaders, s.CutHeaders)
	}
	if s.NotEthernet > 0 {
		fmt.Fprintf(a.stdout, "%d %s skipped as not Ethernet (the first at %s)\n", s.NotEthernet, plural(s.NotEthernet, "frame", "frames"), firstLink)
	}
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
	case fastdrop.ClassBan:
		return "ban"
	}
	return "unknown"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

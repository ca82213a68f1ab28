package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/capture"
	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/loader"
	"github.com/xdpdrop/xdpdrop/pcapng"
)

type captureFlags struct {
	iface, rule, match, sample, rate, write string
	verdicts                                []string
	queue, snaplen                          int
	ruleSamples                             bool
	count                                   uint64
	duration                                time.Duration
}

func (a *app) captureCmd() *cobra.Command {
	f := &captureFlags{}
	cmd := &cobra.Command{
		Use:   "capture --iface IF [--verdict drop] [--rule LINE|TEXT] [--match FILTER] [-w FILE]",
		Short: "Show the frames the fast drop judges, with their verdicts and rules, or write them as pcapng",
		Long: `capture reads samples of frames from the fast drop running on an interface,
as the XDP program saw them, with the verdict each got and the rule that
decided it: what each rule is catching, and what still gets through
(tcpdump never sees a frame that XDP dropped).

Choose the frames with --verdict (drop, pass, redirect, malformed; repeat
it or separate with commas), --rule (a rule's line in the rule file, or its
text as 'xdpdrop rules list' prints it), --queue (an rx queue) and --match
(the fields of a rule, e.g. 'udp dport 53'). The program selects by
verdict, rule and queue; --match is judged here on the sampled bytes. Keep
1 in N of the chosen frames with --sample 1/N, or at most N a second with
--rate N/s; both count the frames that --match keeps when it is given.

Without -w, one line per frame (time, addresses, ports, protocol, length,
verdict, rule, rx queue, CPU); with -w FILE (or -w - for a pipe into
'tcpdump -r -' or Wireshark), pcapng, each packet carrying its verdict,
rule, rx queue and CPU in a comment and in the epb_verdict and epb_queue
options. It runs until --count frames are captured, --duration passes or
Ctrl-C, then prints what it saw, captured and lost (the program never waits
for a capture: frames it could not hand over because the capture fell
behind are counted as lost, and keep their verdict). Up to 8 captures may
run on one interface at once; each removes itself when it exits.

Rules with a sample modifier ('drop udp dport 11211 sample 1/1000') send 1
in N of their frames to a ring of their own whether anyone reads it or
not; --rule-samples reads those (oldest first: they may have waited
there), one such capture at a time, filtered by the other flags here.`,
		Example: `  xdpdrop capture --iface eth3 --verdict drop --count 20
  xdpdrop capture --iface eth3 --rule 12 --sample 1/100 -w rule12.pcapng
  xdpdrop capture --iface eth3 --verdict pass --match 'udp dport 53' -w - | tcpdump -nn -r -
  xdpdrop capture --iface eth3 --rule-samples -w sampled.pcapng`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.capture(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.iface, "iface", "", "interface whose fast drop to capture from (required)")
	fl.StringSliceVar(&f.verdicts, "verdict", nil, "only frames with this verdict: "+strings.Join(capture.VerdictNames(), ", ")+" (repeat or separate with commas)")
	fl.StringVar(&f.rule, "rule", "", "only frames this rule decided: its line in the rule file, or its text")
	fl.IntVar(&f.queue, "queue", -1, "only frames of this rx queue")
	fl.StringVar(&f.match, "match", "", "only frames matching these rule fields, e.g. 'udp dport 53'")
	fl.StringVar(&f.sample, "sample", "", "keep 1 in N of the chosen frames: 1/N")
	fl.StringVar(&f.rate, "rate", "", "keep at most N chosen frames a second: N/s")
	fl.Uint64Var(&f.count, "count", 0, "stop after capturing this many frames (0: no limit)")
	fl.DurationVar(&f.duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	fl.IntVar(&f.snaplen, "snaplen", capture.MaxSnaplen, fmt.Sprintf("bytes of each frame to keep (1 to %d)", capture.MaxSnaplen))
	fl.StringVarP(&f.write, "write", "w", "", "write pcapng to this file ('-': standard output) instead of lines")
	fl.BoolVar(&f.ruleSamples, "rule-samples", false, "read the frames that rules' sample modifiers sent (they wait for a reader), instead of choosing frames")
	_ = cmd.MarkFlagRequired("iface")
	return cmd
}

// parseFraction parses --sample's 1/N.
func parseFraction(s string) (uint32, error) {
	one, n, ok := strings.Cut(s, "/")
	v, err := strconv.ParseUint(n, 10, 32)
	if !ok || one != "1" || err != nil || v == 0 {
		return 0, usagef("--sample %q: want 1/N with N a whole number from 1, e.g. 1/1000", s)
	}
	return uint32(v), nil
}

// parseRate parses --rate's N/s.
func parseRate(s string) (uint32, error) {
	n, ok := strings.CutSuffix(s, "/s")
	v, err := strconv.ParseUint(n, 10, 32)
	if !ok || err != nil || v == 0 {
		return 0, usagef("--rate %q: want N/s with N a whole number from 1, e.g. 100/s", s)
	}
	return uint32(v), nil
}

// captureSetup is what the flags ask for, checked before anything
// touches the kernel.
type captureSetup struct {
	sel   capture.Selection
	match *capture.Match
	every uint32 // user-space sampling (with --match)
	rate  uint32 // user-space cap, exact
	// user is the selection applied here (--rule-samples: the program's
	// ring of rule samples takes no selection).
	user capture.Selection
}

// takes reports whether the user-space selection takes s.
func (u *captureSetup) takes(s *capture.Sample) bool {
	sel := &u.user
	return (sel.Verdicts == 0 || sel.Verdicts&s.Verdict != 0) &&
		(sel.RuleSlot == 0 || sel.RuleSlot == s.Slot) &&
		(!sel.OnQueue || sel.Queue == s.Queue)
}

func (f *captureFlags) setup() (*captureSetup, error) {
	s := &captureSetup{}
	for _, v := range f.verdicts {
		for _, name := range strings.Split(v, ",") {
			b, err := capture.ParseVerdict(strings.TrimSpace(name))
			if err != nil {
				return nil, usagef("--verdict: %v", err)
			}
			s.sel.Verdicts |= b
		}
	}
	if f.queue < -1 {
		return nil, usagef("--queue %d: want an rx queue number, 0 or more", f.queue)
	}
	if f.queue >= 0 {
		s.sel.OnQueue, s.sel.Queue = true, f.queue
	}
	if f.snaplen < 1 || f.snaplen > capture.MaxSnaplen {
		return nil, usagef("--snaplen %d: want 1 to %d", f.snaplen, capture.MaxSnaplen)
	}
	s.sel.Snaplen = f.snaplen
	if f.sample != "" && f.rate != "" {
		return nil, usagef("--sample and --rate: give one of them")
	}
	var every uint32
	if f.sample != "" {
		var err error
		if every, err = parseFraction(f.sample); err != nil {
			return nil, err
		}
	}
	if f.rate != "" {
		var err error
		if s.rate, err = parseRate(f.rate); err != nil {
			return nil, err
		}
	}
	if f.ruleSamples {
		// The program's ring of rule samples is not selected: every
		// flag applies here, to what it holds.
		s.user = s.sel
		s.every = every
		if f.match != "" {
			m, err := capture.ParseMatch(f.match)
			if err != nil {
				return nil, usagef("--match: %v", err)
			}
			s.match = m
		}
		return s, nil
	}
	if f.match != "" {
		m, err := capture.ParseMatch(f.match)
		if err != nil {
			return nil, usagef("--match: %v", err)
		}
		s.match = m
		// The program cannot judge the filter: it sends every chosen
		// frame, with its headers, and the sampling counts what matched.
		s.every = every
		s.sel.Snaplen = max(f.snaplen, capture.HeaderBytes)
	} else {
		s.sel.Every = every
		// The program caps each CPU; the exact cap is applied here.
		s.sel.PerSecond = s.rate
	}
	return s, nil
}

// ruleInfo names the rule of a counter slot.
type ruleInfo struct {
	line   int
	text   string
	origin string // "" for the drop command's rules
}

// ruleNames maps the counter slots of the rule set in force to rules.
func ruleNames(eng *fastdrop.Engine) (map[uint32]ruleInfo, *fastdrop.RuleSet, []uint32, error) {
	rs, slots, err := eng.RuleSlots()
	if err != nil {
		return nil, nil, nil, err
	}
	m := make(map[uint32]ruleInfo, len(slots))
	for i, s := range slots {
		m[s] = ruleInfo{rs.Rules[i].Line, rs.Rules[i].Written(), rs.Rules[i].Origin}
	}
	return m, rs, slots, nil
}

// findRule resolves --rule: a line number, or a rule's text.
func findRule(iface, want string, rs *fastdrop.RuleSet, slots []uint32) (uint32, error) {
	hint := fmt.Sprintf("list them with 'xdpdrop rules list --iface %s'", iface)
	if line, err := strconv.Atoi(want); err == nil {
		for i, r := range rs.Rules {
			if r.Line == line {
				return slots[i], nil
			}
		}
		return 0, fmt.Errorf("--rule %d: no rule of the fast drop on %s comes from line %d: %s", line, iface, line, hint)
	}
	text := want
	if p, err := fastdrop.Parse(strings.NewReader(want+"\n"), "--rule"); err == nil && len(p.Rules) == 1 {
		text = p.Rules[0].String() // canonical: the rule however it is written
	}
	for i, r := range rs.Rules {
		if r.String() == text {
			return slots[i], nil
		}
	}
	return 0, fmt.Errorf("--rule %q: the fast drop on %s has no such rule: %s", want, iface, hint)
}

// captureOut is where samples go: lines or pcapng.
type captureOut struct {
	w     io.Writer
	png   *pcapng.Writer
	iface string
	names map[uint32]ruleInfo
}

func (o *captureOut) ruleText(s *capture.Sample) (rule, text, origin string) {
	switch {
	case s.Verdict&capture.VerdictMalformed != 0:
		return "malformed", "", ""
	case s.Default:
		return "default", "", ""
	}
	if r, ok := o.names[s.Slot]; ok {
		if r.line > 0 {
			return strconv.Itoa(r.line), r.text, r.origin
		}
		return "", r.text, r.origin // added by 'rules add': no line
	}
	return "?", "", "" // a rule added after the capture started, not yet known
}

func (o *captureOut) write(s *capture.Sample) error {
	rule, text, origin := o.ruleText(s)
	if o.png != nil {
		c := "verdict=" + strings.ReplaceAll(s.VerdictName(), " ", ",")
		if rule != "" {
			c += " rule=" + rule
		}
		if origin != "" {
			c += " origin=" + origin // whose rule file the line is of
		}
		if text != "" {
			c += fmt.Sprintf(" rule_text=%q", text)
		}
		c += fmt.Sprintf(" queue=%d cpu=%d", s.Queue, s.CPU)
		return o.png.WritePacket(pcapng.Packet{
			Time: s.Time, Length: s.Length, Data: s.Data, Comments: []string{c},
			HasQueue: true, Queue: uint32(s.Queue), Verdicts: [][]byte{pcapng.XDPVerdict(uint64(s.Action))},
		})
	}
	by := "rule"
	if rule != "" {
		by += " " + rule
	}
	if origin != "" {
		by += " of " + origin
	}
	if text != "" {
		by += fmt.Sprintf(" %q", text)
	}
	if rule == "default" || rule == "malformed" {
		by = rule
	}
	_, err := fmt.Fprintf(o.w, "%s %s, %d bytes: %s by %s, queue %d, cpu %d\n",
		s.Time.Format("15:04:05.000000"), capture.Describe(s.Data), s.Length, s.VerdictName(), by, s.Queue, s.CPU)
	return err
}

func (o *captureOut) flush() error {
	if o.png != nil {
		return o.png.Flush()
	}
	return nil
}

func (a *app) capture(ctx context.Context, f *captureFlags) error {
	cs, err := f.setup()
	if err != nil {
		return err
	}
	att, eng, err := a.needDrop(f.iface)
	if err != nil {
		return err
	}
	defer att.Close()
	defer eng.Close()
	names, rs, slots, err := ruleNames(eng)
	if err != nil {
		return err
	}
	if f.rule != "" {
		if cs.sel.RuleSlot, err = findRule(f.iface, f.rule, rs, slots); err != nil {
			return err
		}
		if f.ruleSamples {
			cs.user.RuleSlot = cs.sel.RuleSlot
		}
	}
	maps, err := capture.MapsOf(eng.Maps())
	if err != nil {
		return fmt.Errorf("the fast drop on %s was attached by an older version, which has no capture support: detach and attach it again ('xdpdrop detach --iface %s', 'xdpdrop drop --iface %s --rules FILE')", f.iface, f.iface, f.iface)
	}

	// The output before the registration: a file that cannot be written
	// changes nothing.
	out := &captureOut{w: a.stdout, iface: f.iface, names: names}
	if f.write != "" {
		w := a.stdout
		if f.write != "-" {
			file, err := os.OpenFile(f.write, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return fmt.Errorf("-w %s: %w", f.write, err)
			}
			defer file.Close()
			w = file
		}
		if out.png, err = pcapng.NewWriter(w, pcapng.WriterOptions{App: "xdpdrop capture"}); err != nil {
			return err
		}
		if _, err := out.png.AddInterface(pcapng.Interface{Name: f.iface, LinkType: pcapng.LinkEthernet, Snaplen: uint32(f.snaplen)}); err != nil {
			return err
		}
		if err := out.png.Flush(); err != nil {
			return fmt.Errorf("-w %s: %w", f.write, err)
		}
	}

	var c *capture.Capture
	if f.ruleSamples {
		c, err = capture.ReadRuleSamples(maps)
	} else {
		c, err = capture.Start(maps, cs.sel)
	}
	if err != nil {
		if errors.Is(err, capture.ErrRuleSamplesBusy) {
			return fmt.Errorf("%w on %s; stop it and try again", err, f.iface)
		}
		if errors.Is(err, capture.ErrNoSlot) {
			return fmt.Errorf("%w on %s: %d captures already run there; stop one and try again", err, f.iface, capture.Slots)
		}
		return err
	}
	fmt.Fprintf(a.stderr, "capturing on %s, snap length %d; stop with Ctrl-C\n", f.iface, f.snaplen)
	res, runErr := a.captureLoop(ctx, f, cs, c, out, eng, att)
	closeErr := c.Close()
	st, _ := c.Stats()
	flushErr := out.flush()
	a.captureSummary(f, cs, st, res)
	return errors.Join(runErr, closeErr, flushErr)
}

// captureResult is what the loop counted in user space.
type captureResult struct {
	received, matched, captured, rateSkipped uint64
}

func (a *app) captureLoop(ctx context.Context, f *captureFlags, cs *captureSetup, c *capture.Capture, out *captureOut, eng *fastdrop.Engine, att *loader.Attachment) (captureResult, error) {
	var res captureResult
	var end time.Time
	if f.duration > 0 {
		end = time.Now().Add(f.duration)
	}
	var winStart time.Time
	var winCount uint32
	var lastRefresh time.Time
	lastCheck := time.Now()
	dirty := false
	var s capture.Sample
	for {
		if ctx.Err() != nil || (!end.IsZero() && !time.Now().Before(end)) {
			return res, nil
		}
		if time.Since(lastCheck) >= time.Second {
			// Detached, or loaded again with bigger tables (and new
			// maps): nothing more would arrive.
			lastCheck = time.Now()
			if ok, err := att.Running(); err == nil && !ok {
				return res, fmt.Errorf("the fast drop this capture reads from is no longer attached to %s (detached, or loaded again because its rules outgrew its tables): start the capture again", f.iface)
			}
		}
		deadline := time.Now().Add(200 * time.Millisecond)
		if !end.IsZero() && end.Before(deadline) {
			deadline = end
		}
		err := c.Read(deadline, &s)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Idle: what was written reaches a pipe's reader now.
			if dirty {
				if err := out.flush(); err != nil {
					return res, writeErr(f, err)
				}
				dirty = false
			}
			continue
		}
		if err != nil {
			return res, err
		}
		res.received++
		if f.ruleSamples && !cs.takes(&s) {
			continue
		}
		if cs.match != nil && !cs.match.Matches(s.Data, s.Length) {
			continue
		}
		// Sampling here counts what the filters here kept (with --match
		// or --rule-samples; otherwise the program sampled).
		res.matched++
		if cs.every > 1 && (res.matched-1)%uint64(cs.every) != 0 {
			continue
		}
		if cs.rate > 0 {
			if s.Time.Sub(winStart) >= time.Second {
				winStart, winCount = s.Time, 0
			}
			if winCount >= cs.rate {
				res.rateSkipped++
				continue
			}
			winCount++
		}
		if len(s.Data) > f.snaplen {
			s.Data = s.Data[:f.snaplen]
		}
		if _, known := out.names[s.Slot]; s.RuleMatched && !known && time.Since(lastRefresh) > time.Second {
			// The rule set changed since the capture started.
			lastRefresh = time.Now()
			if n, _, _, err := ruleNames(eng); err == nil {
				out.names = n
			}
		}
		if err := out.write(&s); err != nil {
			return res, writeErr(f, err)
		}
		dirty = true
		res.captured++
		if f.count > 0 && res.captured >= f.count {
			return res, nil
		}
	}
}

// writeErr: output that went away (a pipe's reader left) ends the
// capture quietly; anything else is an error.
func writeErr(f *captureFlags, err error) error {
	if errors.Is(err, os.ErrClosed) || isBrokenPipe(err) {
		return nil
	}
	if f.write != "" && f.write != "-" {
		return fmt.Errorf("-w %s: %w", f.write, err)
	}
	return err
}

func (a *app) captureSummary(f *captureFlags, cs *captureSetup, st capture.Stats, res captureResult) {
	w := a.stderr
	if f.ruleSamples {
		fmt.Fprintf(w, "%d rule samples sent since the program was loaded, %d lost (no one read them in time); %d read, %d captured\n",
			st.Sent, st.Lost, res.received, res.captured)
		return
	}
	fmt.Fprintf(w, "%d frames seen, %d captured, %d lost (the capture fell behind)", st.Seen, res.captured, st.Lost)
	if cs.match != nil {
		fmt.Fprintf(w, "; %d received, %d matched --match", res.received, res.matched)
	}
	if res.rateSkipped > 0 {
		fmt.Fprintf(w, "; %d over --rate", res.rateSkipped)
	}
	fmt.Fprintln(w)
}

func isBrokenPipe(err error) bool { return errors.Is(err, syscall.EPIPE) }

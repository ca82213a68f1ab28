package main

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/loader"
)

func (a *app) rulesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Add, delete, replace or list the rules of an attached fast drop",
		Long: `rules changes the rule set of the fast drop attached to an interface while
it runs. Each change is atomic, and rules that stay keep their counters.
A rule is written as one line of a rule file (docs/RULES.md); quote it.

Every rule has an origin: drop (xdpdrop drop and these commands, the
default), redirect (a running xdpdrop redirect), or another source's name.
add, del, replace and clear change the rules of one origin (--origin)
and leave the others' alone; list shows every rule with its origin.`,
		Example: `  xdpdrop rules list --iface eth3
  xdpdrop rules add --iface eth3 'drop udp dport 11211' 'drop src 203.0.113.0/24'
  xdpdrop rules del --iface eth3 'drop src 203.0.113.0/24'
  xdpdrop rules replace --iface eth3 'drop udp dport 11211' 'drop udp dport 11211-11212'
  xdpdrop rules replace --iface eth3 --rules attack.rules
  xdpdrop rules clear --iface eth3 --origin redirect`,
	}
	cmd.AddCommand(a.rulesListCmd(), a.rulesAddCmd(), a.rulesDelCmd(), a.rulesReplaceCmd(), a.rulesClearCmd())
	return cmd
}

// parseRuleArgs parses each argument as one rule line.
func parseRuleArgs(args []string) ([]fastdrop.Rule, error) {
	var out []fastdrop.Rule
	for i, arg := range args {
		rs, err := fastdrop.Parse(strings.NewReader(arg), fmt.Sprintf("argument %d", i+1))
		if err != nil {
			return nil, usageError{err}
		}
		first := strings.Fields(arg)
		if len(rs.Rules) != 1 || len(first) == 0 || first[0] == "policy" || first[0] == "malformed" {
			return nil, usagef("argument %d %s: want exactly one rule, like 'drop udp dport 11211'", i+1, quoteClipped(arg))
		}
		out = append(out, rs.Rules[0])
	}
	return out, nil
}

// quoteClipped quotes at most 80 bytes of s and then says how long it
// was, as the rule-file parser's errors do.
func quoteClipped(s string) string {
	if len(s) <= 80 {
		return strconv.Quote(s)
	}
	n := 80
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strconv.Quote(s[:n]) + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// ruleChangeCmd makes `rules add` and `rules del`: parse the arguments as
// rules, open the interface's engine, apply change, say what was done. If
// the change outgrows the tables the program was loaded with and grows is
// set, the program is loaded again with the whole new set (see dropctl.Reload).
func (a *app) ruleChangeCmd(use, short, done string, change func(*fastdrop.Engine, ...fastdrop.Rule) error, grows bool) *cobra.Command {
	var iface, origin string
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rules, err := parseRuleArgs(args)
			if err != nil {
				return err
			}
			o, err := originFlag(origin)
			if err != nil {
				return err
			}
			for i := range rules {
				rules[i].Origin = o
			}
			// Held from reading the rules in force to writing the new set
			// (and the reload, if the tables grow).
			att, eng, release, err := a.lockedDrop(iface, lockTimeout)
			if err != nil {
				return err
			}
			defer release()
			err = change(eng, rules...)
			reloaded := false
			if grows {
				reloaded, err = reloadIfFull(att, eng, err, func() (*fastdrop.RuleSet, error) {
					rs, err := eng.RuleSet()
					if err == nil {
						// Appended, as Add does: compound rules go last.
						rs.Rules = append(rs.Rules, rules...)
					}
					return rs, err
				})
			}
			if err != nil {
				return fmt.Errorf("%s on %s: %w (see the rules with 'xdpdrop rules list --iface %s')", cmd.Name(), iface, err, iface)
			}
			fmt.Fprintf(a.stdout, "%s %d rule(s) on %s\n", done, len(rules), iface)
			if reloaded {
				fmt.Fprintln(a.stdout, reloadedNote)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&iface, "iface", "", "interface (required)")
	addOriginFlag(cmd, &origin)
	addLockTimeout(cmd, &lockTimeout)
	_ = cmd.MarkFlagRequired("iface")
	return cmd
}

// addOriginFlag adds --origin: whose rules a command changes.
func addOriginFlag(cmd *cobra.Command, origin *string) {
	cmd.Flags().StringVar(origin, "origin", "drop", "whose rules to change: drop, redirect, or another origin's name (see 'rules list')")
}

// originFlag turns --origin into a rule origin ("drop" is the default
// origin, "").
func originFlag(s string) (string, error) {
	if s == "drop" {
		return "", nil
	}
	if err := fastdrop.ValidateOrigin(s); err != nil || s == "" {
		return "", usagef("--origin %q: want drop, redirect, or a name of at most %d lower-case letters, digits and -_.:/", s, fastdrop.MaxOriginLen)
	}
	return s, nil
}

func (a *app) rulesClearCmd() *cobra.Command {
	var iface, origin string
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "clear --iface IF --origin ORIGIN",
		Short: "Remove every rule of one origin (for example what a redirect that was killed left)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := originFlag(origin)
			if err != nil {
				return err
			}
			_, eng, release, err := a.lockedDrop(iface, lockTimeout)
			if err != nil {
				return err
			}
			defer release()
			had, err := eng.OriginRules(o)
			if err == nil {
				err = eng.ApplyOrigin(o, &fastdrop.RuleSet{})
			}
			if err != nil {
				return fmt.Errorf("clear the rules of origin %s on %s: %w", origin, iface, err)
			}
			fmt.Fprintf(a.stdout, "removed %d rule(s) of origin %s on %s\n", len(had), origin, iface)
			return nil
		},
	}
	cmd.Flags().StringVar(&iface, "iface", "", "interface (required)")
	cmd.Flags().StringVar(&origin, "origin", "", "whose rules to remove: drop, redirect, or another origin's name (required)")
	addLockTimeout(cmd, &lockTimeout)
	_ = cmd.MarkFlagRequired("iface")
	_ = cmd.MarkFlagRequired("origin")
	return cmd
}

func (a *app) rulesAddCmd() *cobra.Command {
	return a.ruleChangeCmd("add --iface IF RULE...", "Add rules (compound rules go last, so they have the lowest priority)",
		"added", (*fastdrop.Engine).Add, true)
}

func (a *app) rulesDelCmd() *cobra.Command {
	return a.ruleChangeCmd("del --iface IF RULE...", "Delete rules, given by their text", "deleted", (*fastdrop.Engine).Delete, false)
}

func (a *app) rulesReplaceCmd() *cobra.Command {
	var iface, file, policy, malformed, origin string
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "replace --iface IF (OLD NEW | --rules FILE)",
		Short: "Replace one rule in place, or all rules of an origin atomically",
		Args:  cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" && len(args) != 2 {
				return usagef("give OLD and NEW rules, or --rules FILE")
			}
			if file != "" && len(args) != 0 {
				return usagef("give either OLD and NEW rules or --rules FILE, not both")
			}
			var rs *fastdrop.RuleSet
			var rules []fastdrop.Rule
			var err error
			if file != "" {
				rs, err = ruleSetFromFlags(file, nil, policy, malformed)
			} else {
				rules, err = parseRuleArgs(args)
			}
			if err != nil {
				return err
			}
			o, err := originFlag(origin)
			if err != nil {
				return err
			}
			for i := range rules {
				rules[i].Origin = o
			}
			att, eng, release, err := a.lockedDrop(iface, lockTimeout)
			if err != nil {
				return err
			}
			defer release()
			if rs != nil {
				reloaded, err := applyDrop(att, eng, o, rs)
				if err != nil {
					return fmt.Errorf("replace the rules on %s: %w", iface, err)
				}
				prefixes := 0
				for i := range rs.Rules {
					if rs.Rules[i].IsPrefixOnly() {
						prefixes++
					}
				}
				fmt.Fprintf(a.stdout, "replaced the rule set on %s: %d rules (%d compound, %d prefix), policy %s, malformed %s\n",
					iface, len(rs.Rules), len(rs.Rules)-prefixes, prefixes, rs.EffectivePolicy(), rs.EffectiveMalformed())
				if reloaded {
					fmt.Fprintln(a.stdout, reloadedNote)
				}
				return nil
			}
			if err := eng.Replace(rules[0], rules[1]); err != nil {
				return fmt.Errorf("replace a rule on %s: %w (see them with 'xdpdrop rules list --iface %s')", iface, err, iface)
			}
			fmt.Fprintf(a.stdout, "replaced %q with %q on %s\n", rules[0].Written(), rules[1].Written(), iface)
			return nil
		},
	}
	cmd.Flags().StringVar(&iface, "iface", "", "interface (required)")
	cmd.Flags().StringVar(&file, "rules", "", "replace the whole rule set with this file")
	cmd.Flags().StringVar(&policy, "policy", "", "with --rules: override the file's policy (pass or drop)")
	cmd.Flags().StringVar(&malformed, "malformed", "", "with --rules: override the file's malformed verdict")
	addOriginFlag(cmd, &origin)
	addLockTimeout(cmd, &lockTimeout)
	_ = cmd.MarkFlagRequired("iface")
	return cmd
}

// ruleRow is one rule in `rules list --json` and `stats --json`.
type ruleRow struct {
	Index   int    `json:"index"`
	Rule    string `json:"rule"`
	Kind    string `json:"kind"`   // compound or prefix
	Origin  string `json:"origin"` // drop, redirect, or another source's name
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// Limit rules: what conformed (passed) and exceeded (dropped).
	Limit *fastdrop.LimitCounter `json:"limit,omitempty"`
}

// ruleListing is the JSON shape of `rules list --json`.
type ruleListing struct {
	Interface string    `json:"interface"`
	Policy    string    `json:"policy"`
	Malformed string    `json:"malformed"`
	Rules     []ruleRow `json:"rules"`
}

func ruleRows(c *fastdrop.Counters) []ruleRow {
	rows := make([]ruleRow, len(c.Rules))
	for i, rc := range c.Rules {
		kind := "compound"
		if rc.Rule.IsPrefixOnly() {
			kind = "prefix"
		}
		rows[i] = ruleRow{Index: rc.Index, Rule: rc.Rule.Written(), Kind: kind, Origin: fastdrop.OriginName(rc.Rule.Origin), Packets: rc.Packets, Bytes: rc.Bytes, Limit: rc.Limit}
	}
	return rows
}

func (a *app) rulesListCmd() *cobra.Command {
	var iface string
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "list --iface IF [--json]",
		Short: "List the rules in force with their packet and byte counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			att, eng, err := a.needDrop(iface)
			if err != nil {
				return err
			}
			defer att.Close()
			defer eng.Close()
			// Counters has the rules; Policy saves copying them again.
			c, err := eng.Counters()
			if err != nil {
				return err
			}
			policy, malformed, err := eng.Policy()
			if err != nil {
				return err
			}
			l := ruleListing{Interface: iface, Policy: policy.String(), Malformed: malformed.String(), Rules: ruleRows(c)}
			if jsonOut {
				return writeJSON(a.stdout, l)
			}
			bw := bufio.NewWriterSize(a.stdout, 1<<16)
			fmt.Fprintf(bw, "%s: %d rules, policy %s, malformed %s\n", iface, len(l.Rules), l.Policy, l.Malformed)
			writeRuleTable(bw, l.Rules)
			return bw.Flush()
		},
	}
	cmd.Flags().StringVar(&iface, "iface", "", "interface (required)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	_ = cmd.MarkFlagRequired("iface")
	return cmd
}

// writeRuleTable writes the rules as table() would align them (each
// column as wide as its widest cell plus two spaces, the last one not
// padded), in one pass over a million rules instead of the table writer's
// cell by cell bookkeeping.
func writeRuleTable(w *bufio.Writer, rows []ruleRow) {
	head := [5]string{"#", "RULE", "ORIGIN", "PACKETS", "BYTES"}
	width := [4]int{len(head[0]), len(head[1]), len(head[2]), len(head[3])}
	for _, r := range rows {
		width[0] = max(width[0], decimalLen(uint64(r.Index+1)))
		width[1] = max(width[1], utf8.RuneCountInString(r.Rule))
		width[2] = max(width[2], len(r.Origin))
		width[3] = max(width[3], decimalLen(r.Packets))
	}
	var line []byte
	cell := func(s []byte, n, col int) {
		line = append(line, s...)
		for range width[col] + 2 - n {
			line = append(line, ' ')
		}
	}
	line = line[:0]
	for i := range 4 {
		cell([]byte(head[i]), len(head[i]), i)
	}
	w.Write(append(append(line, head[4]...), '\n'))
	var num []byte
	for _, r := range rows {
		line = line[:0]
		num = strconv.AppendInt(num[:0], int64(r.Index+1), 10)
		cell(num, len(num), 0)
		line = append(line, r.Rule...)
		for range width[1] + 2 - utf8.RuneCountInString(r.Rule) {
			line = append(line, ' ')
		}
		cell([]byte(r.Origin), len(r.Origin), 2)
		num = strconv.AppendUint(num[:0], r.Packets, 10)
		cell(num, len(num), 3)
		line = strconv.AppendUint(line, r.Bytes, 10)
		w.Write(append(line, '\n'))
	}
}

// decimalLen is the number of decimal digits of n.
func decimalLen(n uint64) int {
	d := 1
	for n >= 10 {
		n /= 10
		d++
	}
	return d
}

// lockedDrop takes iface's lock and opens its fast drop, for a command
// that changes the rules: the lock is held from reading the rules in force
// to writing the new set (and the reload, if the tables grow). release
// closes both and releases the lock.
func (a *app) lockedDrop(iface string, timeout time.Duration) (att *loader.Attachment, eng *fastdrop.Engine, release func(), err error) {
	lk, err := a.lockIface(iface, timeout)
	if err != nil {
		return nil, nil, nil, err
	}
	att, eng, err = a.needDrop(iface)
	if err != nil {
		lk.Unlock()
		return nil, nil, nil, err
	}
	return att, eng, func() {
		eng.Close()
		att.Close()
		lk.Unlock()
	}, nil
}

package main

import (
	"bufio"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/fastdrop"
)

func (a *app) rulesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Add, delete, replace or list the rules of an attached fast drop",
		Long: `rules changes the rule set of the fast drop attached to an interface while
it runs. Each change is atomic, and rules that stay keep their counters.
A rule is written as one line of a rule file (docs/RULES.md); quote it.`,
		Example: `  xdpdrop rules list --iface eth3
  xdpdrop rules add --iface eth3 'drop udp dport 11211' 'drop src 203.0.113.0/24'
  xdpdrop rules del --iface eth3 'drop src 203.0.113.0/24'
  xdpdrop rules replace --iface eth3 'drop udp dport 11211' 'drop udp dport 11211-11212'
  xdpdrop rules replace --iface eth3 --rules attack.rules`,
	}
	cmd.AddCommand(a.rulesListCmd(), a.rulesAddCmd(), a.rulesDelCmd(), a.rulesReplaceCmd())
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
			return nil, usagef("argument %d %q: want exactly one rule, like 'drop udp dport 11211'", i+1, arg)
		}
		out = append(out, rs.Rules[0])
	}
	return out, nil
}

// ruleChangeCmd makes `rules add` and `rules del`: parse the arguments as
// rules, open the interface's engine, apply change, say what was done.
func (a *app) ruleChangeCmd(use, short, done string, change func(*fastdrop.Engine, ...fastdrop.Rule) error) *cobra.Command {
	var iface string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rules, err := parseRuleArgs(args)
			if err != nil {
				return err
			}
			att, eng, err := needDrop(iface)
			if err != nil {
				return err
			}
			defer att.Close()
			defer eng.Close()
			if err := change(eng, rules...); err != nil {
				return fmt.Errorf("%s on %s: %w (see the rules with 'xdpdrop rules list --iface %s')", cmd.Name(), iface, err, iface)
			}
			fmt.Fprintf(a.stdout, "%s %d rule(s) on %s\n", done, len(rules), iface)
			return nil
		},
	}
	cmd.Flags().StringVar(&iface, "iface", "", "interface (required)")
	_ = cmd.MarkFlagRequired("iface")
	return cmd
}

func (a *app) rulesAddCmd() *cobra.Command {
	return a.ruleChangeCmd("add --iface IF RULE...", "Add rules (compound rules go last, so they have the lowest priority)",
		"added", (*fastdrop.Engine).Add)
}

func (a *app) rulesDelCmd() *cobra.Command {
	return a.ruleChangeCmd("del --iface IF RULE...", "Delete rules, given by their text", "deleted", (*fastdrop.Engine).Delete)
}

func (a *app) rulesReplaceCmd() *cobra.Command {
	var iface, file, policy, malformed string
	cmd := &cobra.Command{
		Use:   "replace --iface IF (OLD NEW | --rules FILE)",
		Short: "Replace one rule in place, or the whole rule set atomically",
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
			att, eng, err := needDrop(iface)
			if err != nil {
				return err
			}
			defer att.Close()
			defer eng.Close()
			if rs != nil {
				if err := eng.Apply(rs); err != nil {
					return fmt.Errorf("replace the rules on %s: %w", iface, err)
				}
				fmt.Fprintf(a.stdout, "replaced the rule set on %s: %d rules\n", iface, len(rs.Rules))
				return nil
			}
			if err := eng.Replace(rules[0], rules[1]); err != nil {
				return fmt.Errorf("replace a rule on %s: %w (see them with 'xdpdrop rules list --iface %s')", iface, err, iface)
			}
			fmt.Fprintf(a.stdout, "replaced %q with %q on %s\n", rules[0].String(), rules[1].String(), iface)
			return nil
		},
	}
	cmd.Flags().StringVar(&iface, "iface", "", "interface (required)")
	cmd.Flags().StringVar(&file, "rules", "", "replace the whole rule set with this file")
	cmd.Flags().StringVar(&policy, "policy", "", "with --rules: override the file's policy (pass or drop)")
	cmd.Flags().StringVar(&malformed, "malformed", "", "with --rules: override the file's malformed verdict")
	_ = cmd.MarkFlagRequired("iface")
	return cmd
}

// ruleRow is one rule in `rules list --json` and `stats --json`.
type ruleRow struct {
	Index   int    `json:"index"`
	Rule    string `json:"rule"`
	Kind    string `json:"kind"` // compound or prefix
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
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
		rows[i] = ruleRow{Index: rc.Index, Rule: rc.Rule.String(), Kind: kind, Packets: rc.Packets, Bytes: rc.Bytes}
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
			att, eng, err := needDrop(iface)
			if err != nil {
				return err
			}
			defer att.Close()
			defer eng.Close()
			rs, err := eng.RuleSet()
			if err != nil {
				return err
			}
			c, err := eng.Counters()
			if err != nil {
				return err
			}
			l := ruleListing{Interface: iface, Policy: rs.EffectivePolicy().String(), Malformed: rs.EffectiveMalformed().String(), Rules: ruleRows(c)}
			if jsonOut {
				return writeJSON(a.stdout, l)
			}
			// Buffered: the table writer writes each cell on its own,
			// which for a million rules is millions of write calls.
			bw := bufio.NewWriterSize(a.stdout, 1<<16)
			fmt.Fprintf(bw, "%s: %d rules, policy %s, malformed %s\n", iface, len(l.Rules), l.Policy, l.Malformed)
			tw := table(bw)
			fmt.Fprintln(tw, "#\tRULE\tPACKETS\tBYTES")
			for _, r := range l.Rules {
				fmt.Fprintf(tw, "%d\t%s\t%d\t%d\n", r.Index+1, r.Rule, r.Packets, r.Bytes)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			return bw.Flush()
		},
	}
	cmd.Flags().StringVar(&iface, "iface", "", "interface (required)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	_ = cmd.MarkFlagRequired("iface")
	return cmd
}

package main

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/dropctl"
	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/loader"
)

// programFastdrop is the Config["program"] value of fast-drop attachments.
const programFastdrop = dropctl.Program

type dropFlags struct {
	iface, mode, rules, policy, malformed string
	deny                                  []string
	force, jsonOut                        bool
	lockTimeout                           time.Duration
}

// dropResult is the JSON shape of `xdpdrop drop --json`.
type dropResult struct {
	Interface string `json:"interface"`
	Mode      string `json:"mode"`
	Reason    string `json:"reason,omitempty"`
	Replaced  bool   `json:"replaced"` // rules replaced on an existing attachment
	// Reloaded: the rule set did not fit the tables the running program
	// was loaded with, so a program with bigger tables replaced it (its
	// counters start from zero).
	Reloaded  bool   `json:"reloaded,omitempty"`
	Rules     int    `json:"rules"`
	Compound  int    `json:"compound_rules"`
	Prefixes  int    `json:"prefix_rules"`
	Policy    string `json:"policy"`
	Malformed string `json:"malformed"`
	PinDir    string `json:"pin_dir"`
}

func (a *app) dropCmd() *cobra.Command {
	f := &dropFlags{}
	cmd := &cobra.Command{
		Use:   "drop --iface IF [--rules FILE] [--deny PREFIX]... [flags]",
		Short: "Attach fast drop with a rule set, or replace the rules of the one attached",
		Long: `drop attaches the fast-drop XDP program to an interface with the rules of
--rules and --deny, and pins it, so it keeps running after the command
returns. Run it again on the same interface to replace the whole rule set
atomically: every packet is judged by the old rules or the new ones, never a
mix, and rules that stay keep their counters. The tables are sized when the
program is loaded, with room for twice the rules; a new set that needs more
makes drop load the program again with bigger tables and swap it in, just as
atomically (the counters then start from zero).

If xdpdrop redirect runs on the interface, drop replaces only its own
rules (and the policy): the redirect's rules and sockets stay, after the
drop rules (docs/RULES.md, "Origins").

Rule syntax: docs/RULES.md. Detach with 'xdpdrop detach --iface IF'.`,
		Example: `  xdpdrop drop --iface eth3 --rules attack.rules
  xdpdrop drop --iface eth3 --deny 203.0.113.0/24 --deny 2001:db8:bad::/48
  xdpdrop drop --iface eth3 --rules allow.rules --policy drop --mode driver`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.drop(f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.iface, "iface", "", "interface to attach to (required)")
	fl.StringVar(&f.mode, "mode", "auto", "driver, generic or auto (driver where the device supports it)")
	fl.StringVar(&f.rules, "rules", "", "rule file (docs/RULES.md)")
	fl.StringArrayVar(&f.deny, "deny", nil, "drop frames from this source prefix (repeatable)")
	fl.StringVar(&f.policy, "policy", "", "verdict when no rule matches: pass or drop (overrides the file)")
	fl.StringVar(&f.malformed, "malformed", "", "verdict for malformed frames: pass or drop (overrides the file)")
	fl.BoolVar(&f.force, "force", false, "replace a program that is not ours")
	fl.BoolVar(&f.jsonOut, "json", false, "print the result as JSON")
	addLockTimeout(cmd, &f.lockTimeout)
	_ = cmd.MarkFlagRequired("iface")
	return cmd
}

// ruleSetFromFlags reads --rules and adds --deny, --policy, --malformed.
func ruleSetFromFlags(rules string, deny []string, policy, malformed string) (*fastdrop.RuleSet, error) {
	rs := &fastdrop.RuleSet{}
	parsed := 0 // rules ParseFile has validated (as a set, too)
	if rules != "" {
		var err error
		if rs, err = fastdrop.ParseFile(rules); err != nil {
			return nil, err
		}
		parsed = len(rs.Rules)
	}
	for _, d := range deny {
		p, err := fastdrop.ParsePrefix("--deny", d)
		if err != nil {
			return nil, usageError{err}
		}
		rs.Rules = append(rs.Rules, fastdrop.PrefixRules(fastdrop.ActionDrop, []netip.Prefix{p})...)
	}
	for _, v := range []struct {
		flag, val string
		dst       *fastdrop.Action
	}{{"policy", policy, &rs.Policy}, {"malformed", malformed, &rs.Malformed}} {
		if v.val == "" {
			continue
		}
		act, err := fastdrop.ParseAction(v.val)
		if err != nil || act == fastdrop.ActionRedirect {
			return nil, usagef("--%s %q: want pass or drop", v.flag, v.val)
		}
		*v.dst = act
	}
	// --policy and --malformed are pass or drop, which Validate accepts:
	// only the --deny rules need checking against the file.
	if err := validateAdded(rs, parsed); err != nil {
		return nil, err
	}
	return rs, nil
}

// validateAdded is rs.Validate for a rule set whose first n rules were
// validated as a set by ParseFile, with the same errors: each later rule
// is checked, and against all for a prefix given twice. For a file of a
// million rules this saves the second pass over them (a second).
func validateAdded(rs *fastdrop.RuleSet, n int) error {
	if n == 0 {
		return rs.Validate()
	}
	where := func(r fastdrop.Rule) string {
		if r.Line > 0 {
			return "line " + strconv.Itoa(r.Line)
		}
		return r.String()
	}
	first := make(map[fastdrop.PrefixKey]int) // prefixes of the added rules: their first rule
	for i := len(rs.Rules) - 1; i >= n; i-- {
		if r := &rs.Rules[i]; r.IsPrefixOnly() {
			first[r.PrefixKey()] = i
		}
	}
	for j := range n {
		if r := &rs.Rules[j]; r.IsPrefixOnly() && len(first) > 0 {
			if k, ok := first[r.PrefixKey()]; ok && j < k {
				first[r.PrefixKey()] = j
			}
		}
	}
	for i := n; i < len(rs.Rules); i++ {
		r := rs.Rules[i]
		if err := r.Validate(); err != nil {
			return fmt.Errorf("rule %d (%s): %w", i, where(r), err)
		}
		if !r.IsPrefixOnly() {
			continue
		}
		if j, ok := first[r.PrefixKey()]; ok && j < i {
			return fmt.Errorf("rule %d (%s): %w: %s is also rule %d (%s)", i, where(r), fastdrop.ErrDuplicatePrefix, r.PrefixKey(), j, where(rs.Rules[j]))
		}
	}
	return nil
}

func (a *app) drop(f *dropFlags) error {
	mode, err := loader.ParseMode(f.mode)
	if err != nil {
		return usagef("--mode %q: want driver, generic or auto", f.mode)
	}
	if f.rules == "" && len(f.deny) == 0 && f.policy == "" {
		return usagef("give rules: --rules FILE, --deny PREFIX, or at least --policy")
	}
	rs, err := ruleSetFromFlags(f.rules, f.deny, f.policy, f.malformed)
	if err != nil {
		return err
	}
	res := dropResult{Interface: f.iface, Policy: rs.EffectivePolicy().String(), Malformed: rs.EffectiveMalformed().String()}
	for _, r := range rs.Rules {
		if r.IsPrefixOnly() {
			res.Prefixes++
		} else {
			res.Compound++
		}
	}
	res.Rules = len(rs.Rules)

	// From the first look at the pins to the last write, no other command
	// may change the interface.
	lk, err := a.lockIface(f.iface, f.lockTimeout)
	if err != nil {
		return err
	}
	defer lk.Unlock()

	// Already ours? Replace the rules in place.
	att, eng, err := a.openDrop(f.iface)
	if errors.Is(err, loader.ErrStale) {
		// Pins of an interface that went away (and perhaps came back
		// under the same name) must not stand in the way of a new attach.
		dir, why, rerr := loader.RemoveStalePins(f.iface, a.pinRoot)
		if rerr != nil {
			return rerr
		}
		if dir != "" {
			fmt.Fprintf(a.stderr, "xdpdrop: removed stale pins %s: %s\n", dir, why)
		}
		att, eng, err = a.openDrop(f.iface)
	}
	switch {
	case err == nil:
		defer att.Close()
		defer eng.Close()
		reloaded, err := applyDrop(att, eng, "", rs)
		res.Reloaded = reloaded
		if err != nil {
			return fmt.Errorf("replace the rules on %s: %w", f.iface, err)
		}
		res.Replaced, res.Mode, res.Reason, res.PinDir = true, att.Mode().String(), att.Reason(), att.PinDir()
		return a.printDrop(res, f.jsonOut)
	case !errors.Is(err, loader.ErrNotPinned):
		return err
	}

	att, err = dropctl.Attach(rs, loader.Options{
		Interface: f.iface,
		Mode:      mode,
		Pin:       true,
		PinRoot:   a.pinRoot,
		Force:     f.force,
	})
	if err != nil {
		if !f.force && (errors.Is(err, loader.ErrForeign) || errors.Is(err, loader.ErrAlreadyAttached)) {
			return fmt.Errorf("%w, or replace it: add --force", err)
		}
		return err
	}
	defer att.Close()
	res.Mode, res.Reason, res.PinDir = att.Mode().String(), att.Reason(), att.PinDir()
	return a.printDrop(res, f.jsonOut)
}

// applyDrop replaces the rules of origin (and, for the default origin's
// file, the policy and malformed verdict; another origin's only if its
// file names them) on a running fast drop, leaving the
// rules of other origins (xdpdrop redirect's) in force, and loads the
// program again with bigger tables if they outgrow it.
func applyDrop(att *loader.Attachment, eng *fastdrop.Engine, origin string, rs *fastdrop.RuleSet) (reloaded bool, err error) {
	set := *rs
	if origin == "" {
		// The drop command's file owns the policies: no line is pass.
		set.Policy, set.Malformed = rs.EffectivePolicy(), rs.EffectiveMalformed()
	}
	return dropctl.ApplyOrigin(att, eng, origin, &set)
}

const reloadedNote = "(the rules outgrew the tables the program was loaded with: it was loaded again with bigger ones and swapped in; rule counters start from zero)"

// reloadIfFull is dropctl.ReloadIfFull: err passed on, or the program
// loaded again for set's rule set (the whole set, every origin's rules)
// when the tables are full; a running xdpdrop redirect keeps its sockets.
func reloadIfFull(att *loader.Attachment, old *fastdrop.Engine, err error, set func() (*fastdrop.RuleSet, error)) (reloaded bool, _ error) {
	return dropctl.ReloadIfFull(att, old, err, set)
}

func (a *app) printDrop(res dropResult, jsonOut bool) error {
	if jsonOut {
		return writeJSON(a.stdout, res)
	}
	verb := "attached fast drop to"
	if res.Replaced {
		verb = "replaced the rules on"
	}
	fmt.Fprintf(a.stdout, "%s %s in %s mode: %d rules (%d compound, %d prefix), policy %s, malformed %s\n",
		verb, res.Interface, res.Mode, res.Rules, res.Compound, res.Prefixes, res.Policy, res.Malformed)
	if res.Reason != "" && !res.Replaced {
		fmt.Fprintf(a.stdout, "(%s)\n", res.Reason)
	}
	if res.Reloaded {
		fmt.Fprintln(a.stdout, reloadedNote)
	}
	return nil
}

// openDrop reopens the pinned fast-drop attachment of iface and its engine.
// It wraps loader.ErrNotPinned when nothing of ours is pinned there.
func (a *app) openDrop(iface string) (*loader.Attachment, *fastdrop.Engine, error) {
	return dropctl.Open(iface, a.pinRoot)
}

// otherLayoutAdvice names the commands that replace pins of another
// version of xdpdrop (fastdrop.ErrOtherLayout).
func otherLayoutAdvice(err error, iface string) error { return dropctl.OtherLayoutAdvice(err, iface) }

// dropRuleCount returns the number of rules of the fast drop attached to
// iface, without reading the rules (see fastdrop.RuleCount).
func (a *app) dropRuleCount(iface string) (int, error) {
	att, err := loader.Open(iface, a.pinRoot)
	if err != nil {
		return 0, err
	}
	defer att.Close()
	if p := att.Meta().Config["program"]; p != programFastdrop {
		return 0, fmt.Errorf("%s runs xdpdrop's %q program, not fast drop", iface, p)
	}
	n, err := fastdrop.RuleCount(att.MapsDir())
	return n, otherLayoutAdvice(err, iface)
}

// needDrop is openDrop for commands that need fast drop to be there.
func (a *app) needDrop(iface string) (*loader.Attachment, *fastdrop.Engine, error) {
	att, eng, err := a.openDrop(iface)
	switch {
	case errors.Is(err, loader.ErrNotPinned):
		return nil, nil, fmt.Errorf("no fast drop on %s: attach it with 'xdpdrop drop --iface %s --rules FILE'", iface, iface)
	case errors.Is(err, loader.ErrStale):
		return nil, nil, fmt.Errorf("no fast drop runs on %s: %w; or attach it again with 'xdpdrop drop --iface %s --rules FILE'", iface, err, iface)
	}
	return att, eng, err
}

func (a *app) detachCmd() *cobra.Command {
	var iface string
	var force, jsonOut bool
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "detach --iface IF [--force]",
		Short: "Detach xdpdrop's program from an interface and remove its pins",
		Long: `detach removes the XDP program xdpdrop attached to an interface, and its
pins in bpffs. A program attached by something else (ip link, xdp-loader,
another tool) is left alone unless --force is given. Detaching an interface
that runs nothing of xdpdrop's succeeds and says so.`,
		Example: `  xdpdrop detach --iface eth3
  xdpdrop detach --iface eth3 --force   # also a program that is not ours`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lk, err := a.lockIface(iface, lockTimeout)
			if err != nil {
				return err
			}
			defer lk.Unlock()
			detached := true
			if err := loader.DetachInterface(iface, loader.DetachOptions{Force: force, PinRoot: a.pinRoot}); err != nil {
				// Nothing there is what detach is for: a second detach
				// (or one that lost the race to another) succeeds.
				if !errors.Is(err, loader.ErrNotAttached) {
					return err
				}
				detached = false
			}
			if jsonOut {
				return writeJSON(a.stdout, map[string]any{"interface": iface, "detached": detached})
			}
			if !detached {
				fmt.Fprintf(a.stdout, "nothing attached to %s: nothing to detach\n", iface)
				return nil
			}
			fmt.Fprintf(a.stdout, "detached from %s\n", iface)
			return nil
		},
	}
	cmd.Flags().StringVar(&iface, "iface", "", "interface (required)")
	cmd.Flags().BoolVar(&force, "force", false, "detach a program that is not ours too")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the result as JSON")
	addLockTimeout(cmd, &lockTimeout)
	_ = cmd.MarkFlagRequired("iface")
	return cmd
}

// itoa is strconv.Itoa, short for tables.
func itoa(n int) string { return strconv.Itoa(n) }

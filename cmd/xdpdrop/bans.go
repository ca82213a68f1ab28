package main

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/fastdrop"
)

// banRow is one ban in `bans --json`.
type banRow struct {
	Source      string  `json:"source"`
	Rule        string  `json:"rule"` // "" if the rule that made it is gone
	LeftSeconds float64 `json:"left_seconds"`
	AgeSeconds  float64 `json:"age_seconds"`
	Dropped     uint64  `json:"dropped"`
}

// banListing is `bans --json`.
type banListing struct {
	Interface string   `json:"interface"`
	Bans      []banRow `json:"bans"`
}

func (a *app) bansCmd() *cobra.Command {
	var iface string
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "bans --iface IF [--json]",
		Short: "List the sources that limit rules banned, with the time left",
		Long: `bans lists the sources that limit rules with 'ban' banned on an interface:
the banned source (its per src prefix), the rule that banned it ("-" when
that rule has since been removed: bans outlive rule changes), how long the
ban still lasts and how many frames it dropped. The kernel ends bans by
itself when their time is up; 'xdpdrop unban' lifts them earlier.`,
		Example: `  xdpdrop bans --iface eth3
  xdpdrop bans --iface eth3 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if iface == "" {
				return usagef("--iface is required")
			}
			att, eng, err := a.needDrop(iface)
			if err != nil {
				return err
			}
			defer att.Close()
			defer eng.Close()
			bans, err := eng.Bans()
			if err != nil {
				return err
			}
			out := banListing{Interface: iface, Bans: make([]banRow, 0, len(bans))}
			for _, b := range bans {
				out.Bans = append(out.Bans, banRow{Source: b.Source.String(), Rule: b.Rule,
					LeftSeconds: b.Left.Seconds(), AgeSeconds: b.Since.Seconds(), Dropped: b.Dropped})
			}
			if jsonOut {
				return writeJSON(a.stdout, out)
			}
			if len(bans) == 0 {
				fmt.Fprintf(a.stdout, "no bans on %s\n", iface)
				return nil
			}
			tw := table(a.stdout)
			fmt.Fprintln(tw, "SOURCE\tLEFT\tDROPPED\tRULE\t")
			for _, b := range bans {
				rule := b.Rule
				if rule == "" {
					rule = "- (removed)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t\n", b.Source, b.Left.Round(100*time.Millisecond), b.Dropped, rule)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&iface, "iface", "", "interface whose fast drop to read (required)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}

// unbanResult is `unban --json`.
type unbanResult struct {
	Interface string   `json:"interface"`
	Lifted    []string `json:"lifted"`
}

func (a *app) unbanCmd() *cobra.Command {
	var iface string
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "unban --iface IF ADDR|PREFIX|all [--json]",
		Short: "Lift bans made by limit rules before their time is up",
		Long: `unban lifts the bans (see 'xdpdrop bans') of an address: every ban whose
prefix holds it, or of a prefix given as such, or with 'all' every ban on
the interface. Lifting a ban that does not exist is not an error: it says
that nothing was lifted. A source that goes on exceeding its limit is
banned again.`,
		Example: `  xdpdrop unban --iface eth3 198.51.100.7
  xdpdrop unban --iface eth3 198.51.100.0/24
  xdpdrop unban --iface eth3 all --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if iface == "" {
				return usagef("--iface is required")
			}
			all := args[0] == "all"
			var p netip.Prefix
			if !all {
				var err error
				if p, err = fastdrop.ParsePrefix("unban", args[0]); err != nil {
					return usagef("%v (or all)", err)
				}
			}
			att, eng, err := a.needDrop(iface)
			if err != nil {
				return err
			}
			defer att.Close()
			defer eng.Close()
			lifted, err := eng.Unban(p, all)
			if err != nil {
				return err
			}
			res := unbanResult{Interface: iface, Lifted: make([]string, 0, len(lifted))}
			for _, l := range lifted {
				res.Lifted = append(res.Lifted, l.String())
			}
			if jsonOut {
				return writeJSON(a.stdout, res)
			}
			if len(lifted) == 0 {
				fmt.Fprintf(a.stdout, "no ban of %s on %s: nothing lifted\n", args[0], iface)
				return nil
			}
			for _, l := range res.Lifted {
				fmt.Fprintf(a.stdout, "lifted the ban of %s on %s\n", l, iface)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&iface, "iface", "", "interface whose fast drop to change (required)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/agent"
	"github.com/xdpdrop/xdpdrop/loader"
)

// statusRow is one interface in `xdpdrop status --json`: the loader's
// report plus, for fast drop, the rule count in force.
type statusRow struct {
	loader.IfaceStatus
	Rules *int `json:"rules,omitempty"`
	// Agent: the state of xdpdrop agent for an interface it filters (read
	// from its status file, see --agent-status).
	Agent *agentRow `json:"agent,omitempty"`
}

func (a *app) statusCmd() *cobra.Command {
	var iface, agentStatus string
	var jsonOut, all, clean bool
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "status [--iface IF] [--json]",
		Short: "Show which XDP programs run where, ours or foreign, and their pins",
		Long: `status lists the XDP programs attached to every interface (or one): mode,
program id, name and tag, whether xdpdrop attached it, whether it is pinned,
and for fast drop the number of rules. Pins left behind by interfaces that no
longer exist are shown as stale; --clean removes them.

Where xdpdrop agent runs, status also shows its state: for each of its
interfaces the rules in force by origin (rule files, BGP), rule files that
failed to load, and its BGP sessions per neighbour with the routes
received, accepted, refused and stale. It reads them from the status file
the agent writes (status.file in its config): --agent-status, by default
/run/xdpdrop/agent.json, where the systemd unit and the DaemonSet have it.`,
		Example: `  xdpdrop status
  xdpdrop status --iface eth3 --json
  xdpdrop status --clean
  xdpdrop status --agent-status /run/xdpdrop/agent.json --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if clean {
				if lockTimeout < 0 {
					return usagef("--lock-timeout %s: must not be negative", lockTimeout)
				}
				removed, err := loader.CleanStaleTimeout(a.pinRoot, lockTimeout)
				for _, r := range removed {
					fmt.Fprintf(a.stdout, "removed stale pins %s\n", r)
				}
				if err != nil {
					return err
				}
			}
			ag, err := readAgentStatus(agentStatus, cmd.Flags().Changed("agent-status"))
			if err != nil {
				return err
			}
			sts, err := loader.Status(iface, a.pinRoot)
			if err != nil {
				return err
			}
			rows := make([]statusRow, 0, len(sts))
			for _, st := range sts {
				if len(st.Programs) == 0 && st.PinDir == "" && !all && iface == "" && !ag.has(st.Interface) {
					continue // nothing to say about this interface
				}
				row := statusRow{IfaceStatus: st, Agent: ag.row(st.Interface)}
				if st.PinDir != "" && !st.Stale && ours(st, programFastdrop) {
					if n, err := a.dropRuleCount(st.Interface); err == nil {
						row.Rules = &n
					}
				}
				rows = append(rows, row)
			}
			if jsonOut {
				return writeJSON(a.stdout, rows)
			}
			if len(rows) == 0 {
				fmt.Fprintln(a.stdout, "no XDP programs attached")
				return ag.print(a.stdout, iface)
			}
			tw := table(a.stdout)
			fmt.Fprintln(tw, "INTERFACE\tMODE\tPROGRAM\tID\tTAG\tOURS\tPINNED\tRULES\tDETAILS")
			for _, r := range rows {
				if len(r.Programs) == 0 {
					fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t%s\t-\t%s\n", r.Interface, yesNo(r.PinDir != ""), details(r, nil))
				}
				for _, p := range r.Programs {
					rules := "-"
					if r.Rules != nil {
						rules = itoa(*r.Rules)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Interface, p.Mode, p.Name, p.ID, p.Tag,
						yesNo(p.Ours), yesNo(p.Pinned), rules, details(r, &p))
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			return ag.print(a.stdout, iface)
		},
	}
	cmd.Flags().StringVar(&iface, "iface", "", "only this interface")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	cmd.Flags().BoolVar(&all, "all", false, "list interfaces without XDP programs too")
	cmd.Flags().BoolVar(&clean, "clean", false, "remove stale pins first")
	cmd.Flags().StringVar(&agentStatus, "agent-status", agent.DefaultStatusFile,
		"the status file of xdpdrop agent (its status.file) to show the agent's state from; \"\" for none")
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", loader.DefaultLockTimeout,
		"with --clean: how long to wait for another xdpdrop command that is changing an interface")
	return cmd
}

// ours reports whether the interface runs xdpdrop's program of that name.
func ours(st loader.IfaceStatus, program string) bool {
	for _, p := range st.Programs {
		if p.Ours && p.Meta != nil && p.Meta.Config["program"] == program {
			return true
		}
	}
	return false
}

func details(r statusRow, p *loader.ProgStatus) string {
	var d []string
	if r.Stale {
		d = append(d, "stale pins: "+r.StaleReason+" (remove with 'xdpdrop status --clean')")
	}
	if p != nil && p.Meta != nil {
		m := p.Meta
		if prog := m.Config["program"]; prog != "" {
			d = append(d, prog)
		}
		d = append(d, "via "+m.Method.String())
		if !m.AttachedAt.IsZero() {
			d = append(d, fmt.Sprintf("attached %s by pid %d", m.AttachedAt.Local().Format("2006-01-02 15:04:05"), m.PID))
		}
	}
	if p != nil && !p.Ours && p.Opaque {
		d = append(d, "not inspectable: opening a program by id needs CAP_SYS_ADMIN, so whether it is xdpdrop's is unknown")
	} else if p != nil && !p.Ours {
		d = append(d, "foreign: detach with 'xdpdrop detach --iface "+r.Interface+" --force'")
	}
	return strings.Join(d, ", ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

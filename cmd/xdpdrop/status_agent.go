package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/xdpdrop/xdpdrop/agent"
)

// agentView is what `xdpdrop status` shows of an agent: read from the
// status file the agent rewrites after every change (its status.file).
type agentView struct {
	file    string
	written time.Time
	st      agent.Status
}

// agentRow is the "agent" object of an interface in `status --json`: the
// agent's state for that interface and its BGP sessions (field names
// stable, docs/AGENT.md).
type agentRow struct {
	StatusFile string                 `json:"status_file"`
	Written    time.Time              `json:"written"` // when the agent last wrote it
	Ready      bool                   `json:"ready"`   // every interface of the agent has its rules in force
	InForce    bool                   `json:"in_force"`
	FileRules  int                    `json:"file_rules"` // rules in force from rule files and inline rules
	BGPRules   int                    `json:"bgp_rules"`  // rules in force from FlowSpec routes
	Error      string                 `json:"error,omitempty"`
	BGP        *agentBGPRow           `json:"bgp,omitempty"`
	Files      []agent.FileStatus     `json:"files"`
	iface      *agent.InterfaceStatus // nil: not one of the agent's interfaces
}

// agentBGPRow is the agent's BGP speaker: sessions per neighbour and route
// counts (the routes themselves are in the agent's status file).
type agentBGPRow struct {
	LocalAS   uint32                 `json:"local_as"`
	RouterID  string                 `json:"router_id"`
	Received  int                    `json:"routes_received"`
	Accepted  int                    `json:"routes_accepted"`
	Refused   int                    `json:"routes_refused"`
	Stale     int                    `json:"routes_stale"`
	Neighbors []agent.NeighborStatus `json:"neighbors"`
}

// readAgentStatus reads the agent's status file. A missing file is no
// agent (nil, nil) unless the user named it (explicit).
func readAgentStatus(path string, explicit bool) (*agentView, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the agent's status: %w (the agent writes it where its config's status file says)", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read the agent's status: %w", err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read the agent's status %s: %w", path, err)
	}
	v := &agentView{file: path, written: fi.ModTime()}
	if err := json.Unmarshal(b, &v.st); err != nil {
		return nil, fmt.Errorf("read the agent's status %s: not the status of xdpdrop agent: %w", path, err)
	}
	return v, nil
}

// row is the agent's part of iface's status row; nil if iface is not one
// of the agent's interfaces.
func (v *agentView) row(iface string) *agentRow {
	if v == nil {
		return nil
	}
	for i := range v.st.Interfaces {
		is := &v.st.Interfaces[i]
		if is.Name != iface {
			continue
		}
		r := &agentRow{StatusFile: v.file, Written: v.written, Ready: v.st.Ready, InForce: is.InForce,
			FileRules: is.FileRules, BGPRules: is.BGPRules, Error: is.Error, Files: v.st.Files, iface: is}
		if r.Files == nil {
			r.Files = []agent.FileStatus{}
		}
		if b := v.st.BGP; b != nil {
			r.BGP = &agentBGPRow{LocalAS: b.LocalAS, RouterID: b.RouterID, Received: b.Received, Accepted: b.Accepted,
				Refused: b.Refused, Stale: b.Stale, Neighbors: b.Neighbors}
			if r.BGP.Neighbors == nil {
				r.BGP.Neighbors = []agent.NeighborStatus{}
			}
		}
		return r
	}
	return nil
}

// has reports whether iface is one of the agent's interfaces.
func (v *agentView) has(iface string) bool { return v.row(iface) != nil }

// print writes the agent's state for people, after the table of programs.
func (v *agentView) print(w io.Writer, only string) error {
	if v == nil {
		return nil
	}
	s := v.st
	state := "ready"
	if !s.Ready {
		state = "not ready: an interface has no rules in force"
	}
	fmt.Fprintf(w, "\nagent (%s, written %s): %s, %d rule-set swaps since %s\n", v.file,
		v.written.Local().Format("2006-01-02 15:04:05"), state, s.Swaps, s.Started.Local().Format("2006-01-02 15:04:05"))
	for _, is := range s.Interfaces {
		if only != "" && is.Name != only {
			continue
		}
		what := fmt.Sprintf("%d file rules (origin %s), %d bgp rules (origin %s) in force", is.FileRules, is.FileOrigin, is.BGPRules, is.BGPOrigin)
		if is.Refused > 0 {
			what += fmt.Sprintf("; %d file rules refused (their prefix is another origin's rule)", is.Refused)
		}
		if !is.InForce {
			what = "no rules in force"
		}
		if is.Error != "" {
			what += "; last change failed (the rules before it stay in force): " + is.Error
		}
		fmt.Fprintf(w, "  %s: %s\n", is.Name, what)
	}
	for _, f := range s.Files {
		if f.Error != "" {
			fmt.Fprintf(w, "  rule file %s: not loaded, its last %d good rules stay in force: %s\n", f.Path, f.Rules, f.Error)
		}
	}
	if s.BGP == nil {
		return nil
	}
	b := s.BGP
	fmt.Fprintf(w, "  bgp: AS %d, router id %s; routes received %d, accepted %d, refused %d, stale %d\n",
		b.LocalAS, b.RouterID, b.Received, b.Accepted, b.Refused, b.Stale)
	tw := table(w)
	fmt.Fprintln(tw, "  NEIGHBOR\tAS\tSTATE\tSINCE\tRECEIVED\tACCEPTED\tREFUSED\tSTALE")
	for _, n := range b.Neighbors {
		since := "-"
		if !n.Since.IsZero() {
			since = n.Since.Local().Format("2006-01-02 15:04:05")
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\n", n.Address, n.AS, n.State, since, n.Received, n.Accepted, n.Refused, n.Stale)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var refused []string
	for _, r := range b.Routes {
		if r.State == agent.RouteRefused {
			refused = append(refused, fmt.Sprintf("  refused from %s: %s: %s", r.Neighbor, r.NLRI, r.Reason))
		}
	}
	if len(refused) > 0 {
		fmt.Fprintln(w, strings.Join(refused, "\n"))
	}
	return nil
}

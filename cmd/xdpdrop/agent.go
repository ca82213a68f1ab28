package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/agent"
)

func (a *app) agentCmd() *cobra.Command {
	var config, check, logFormat, logLevel string
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "agent (--config FILE | --check FILE)",
		Short: "Run the agent: rule files and BGP FlowSpec routes kept in force on interfaces",
		Long: `agent runs until stopped (SIGTERM or Ctrl-C), keeping the fast-drop program
of each interface of its config fed with the rules of its rule files and
with the BGP FlowSpec routes (RFC 8955, RFC 8956) its neighbours announce to
the BGP speaker it runs. Rule files are reloaded when they change and on
SIGHUP; a file that fails to parse keeps its last good rules in force and
says why in the log and in the status. A FlowSpec route the rule language
cannot express exactly is refused (never installed wider or narrower),
logged and listed in the status. Stopped or killed, the agent leaves the
last rule set in force; started again, it adopts it.

--check reads the config and every rule file and says what each interface
would get, touching nothing. The config format, the status fields and how
to deploy the agent: docs/AGENT.md.`,
		Example: `  xdpdrop agent --check /etc/xdpdrop/agent.yaml
  xdpdrop agent --config /etc/xdpdrop/agent.yaml --log-format json
  curl -s localhost:9670/status   # with status: {listen: "127.0.0.1:9670"}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (config == "") == (check == "") {
				return usagef("give --config FILE to run, or --check FILE to validate")
			}
			if check != "" {
				return a.agentCheck(check, jsonOut)
			}
			log, err := agentLogger(a, logFormat, logLevel)
			if err != nil {
				return err
			}
			return a.agentRun(cmd.Context(), config, log)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&config, "config", "", "run with this config file (YAML, docs/AGENT.md)")
	fl.StringVar(&check, "check", "", "validate this config file and its rule files, and exit")
	fl.StringVar(&logFormat, "log-format", "text", "log lines as text or json")
	fl.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fl.BoolVar(&jsonOut, "json", false, "with --check: print the result as JSON")
	return cmd
}

func agentLogger(a *app, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(a.stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(a.stderr, opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", format)
}

func (a *app) agentCheck(path string, jsonOut bool) error {
	cfg, err := agent.LoadConfig(path)
	if err != nil {
		return err
	}
	res, err := agent.Check(cfg)
	if err != nil {
		return err
	}
	if jsonOut {
		return writeJSON(a.stdout, map[string]any{"config": path, "ok": true, "interfaces": res})
	}
	for _, r := range res {
		fs := ""
		if r.FlowSpec {
			fs = ", and the FlowSpec rules from BGP"
		}
		fmt.Fprintf(a.stdout, "%s: %d rules (%d compound, %d prefix), policy %s%s\n", r.Interface, r.Rules, r.Compound, r.Prefixes, r.Policy, fs)
	}
	if cfg.BGP != nil {
		fmt.Fprintf(a.stdout, "bgp: local AS %d, router id %s, %d neighbor(s)\n", cfg.BGP.LocalAS, cfg.BGP.RouterID, len(cfg.BGP.Neighbors))
	}
	fmt.Fprintf(a.stdout, "%s: ok\n", path)
	return nil
}

func (a *app) agentRun(ctx context.Context, path string, log *slog.Logger) error {
	cfg, err := agent.LoadConfig(path)
	if err != nil {
		return err
	}
	if cfg.PinRoot == "" {
		cfg.PinRoot = a.pinRoot
	}
	ag, err := agent.New(cfg, agent.Options{Logger: log})
	if err != nil {
		return err
	}
	// SIGHUP rereads the rule files (main leaves it to the agent).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: rereading the rule files")
				ag.Reload()
			}
		}
	}()
	return ag.Run(ctx)
}

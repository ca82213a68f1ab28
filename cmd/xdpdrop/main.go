package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/loader"
)

func main() {
	// SIGHUP (terminal closed) and SIGPIPE (output piped into a reader
	// that left, e.g. `| head`) must not kill a foreground command before
	// it removes what it made: they cancel it like Ctrl-C. The handler
	// stays until the process exits: a signal arriving between the end of
	// the command and the exit must not turn a clean exit into "killed".
	// `xdpdrop agent` is the exception: SIGHUP rereads its rule files.
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE}
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		sigs = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE}
	}
	ctx, _ := signal.NotifyContext(context.Background(), sigs...)
	// A command that loads a million rules holds a few hundred MiB of
	// them and their tables at once; collecting garbage at 1.5 times
	// that rather than twice keeps its peak about 100 MiB lower, at no
	// measurable cost in time (docs/BENCHMARKS.md). GOGC still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks an error as wrong usage (exit 2) rather than failure.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// app carries what every command needs; there is no package-level state.
type app struct {
	stdout, stderr io.Writer
	// pinRoot is --pin-root: the directory of per-interface pin
	// directories ("" never: the flag defaults to loader.DefaultPinRoot).
	pinRoot string
}

// run runs the command line args until done or ctx is canceled, and
// returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		fmt.Fprintf(stderr, "xdpdrop: %v\n", err)
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	}
	fmt.Fprintf(stderr, "xdpdrop: %s\n", explain(err))
	return exitFailure
}

// isCobraUsage recognises the errors cobra itself returns for bad command
// lines, which carry no type of their own.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "flag needs an argument", "invalid argument", "required flag", "accepts ", "requires at least", "requires at most", "if any flags in the group"} {
		if strings.HasPrefix(msg, p) || strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "xdpdrop",
		Short: "XDP fast drop and AF_XDP in Go",
		Long: `xdpdrop drops unwanted traffic in the driver with XDP, hands selected
traffic to user space through AF_XDP sockets, and shows what each rule and
queue is doing.`,
		Example: `  xdpdrop drop --iface eth3 --rules blocklist.rules
  xdpdrop stats --iface eth3 --watch
  xdpdrop detach --iface eth3
  xdpdrop demo`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
	}
	root.PersistentFlags().StringVar(&a.pinRoot, "pin-root", loader.DefaultPinRoot,
		"directory on bpffs that holds one directory of pins per interface (a service user needs one of its own)")
	// Subcommands inherit this: every bad flag is a usage error (exit 2).
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		a.dropCmd(),
		a.rulesCmd(),
		a.statusCmd(),
		a.statsCmd(),
		a.captureCmd(),
		a.bansCmd(),
		a.unbanCmd(),
		a.detachCmd(),
		a.redirectCmd(),
		a.testCmd(),
		a.genCmd(),
		a.benchCmd(),
		a.demoCmd(),
		a.exporterCmd(),
		a.docsCmd(),
		a.agentCmd(),
	)
	// Add cobra's completion command now rather than at Execute, so that
	// the reference (xdpdrop docs) sees the same tree as users do.
	root.InitDefaultCompletionCmd()
	return root
}

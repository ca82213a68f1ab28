package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCLIReferenceUpToDate fails when docs/CLI.md no longer matches the
// commands' help: run `go run ./cmd/xdpdrop docs --out docs/CLI.md`.
func TestCLIReferenceUpToDate(t *testing.T) {
	var buf bytes.Buffer
	a := &app{stdout: &buf, stderr: &buf}
	writeReference(&buf, a.rootCmd())
	want, err := os.ReadFile("../../docs/CLI.md")
	require.NoError(t, err)
	require.Equal(t, string(want), buf.String(), "docs/CLI.md is stale: run 'go run ./cmd/xdpdrop docs --out docs/CLI.md'")
}

// TestEveryCommandHasExamples: --help with examples on every command.
func TestEveryCommandHasExamples(t *testing.T) {
	a := &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	root := a.rootCmd()
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		require.NotEmpty(t, c.Example, "%s --help needs examples", c.Name())
	}
}

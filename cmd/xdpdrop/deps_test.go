package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// TestProductDoesNotImportTestHarness checks that the CLI and the product
// packages it builds on do not link the test harness: demo and bench use
// package sandbox and pktgen's frame builder, never internal/frames or
// internal/testenv.
func TestProductDoesNotImportTestHarness(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		testenv.SkipOrFail(t, "no go command in PATH to list the imports with")
	}
	// Without -test, .Imports are what the non-test files import.
	deps, err := exec.Command("go", "list", "-f", `{{.ImportPath}}: {{join .Imports " "}}`,
		"github.com/xdpdrop/xdpdrop/...").CombinedOutput()
	require.NoError(t, err, "%s", deps)
	harness := []string{"github.com/xdpdrop/xdpdrop/internal/frames", "github.com/xdpdrop/xdpdrop/internal/testenv"}
	for line := range strings.SplitSeq(strings.TrimSpace(string(deps)), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		if strings.HasPrefix(pkg, "github.com/xdpdrop/xdpdrop/internal/") {
			continue
		}
		for imp := range strings.FieldsSeq(imports) {
			for _, h := range harness {
				require.NotEqual(t, h, imp, "%s imports the test harness", pkg)
			}
		}
	}
}

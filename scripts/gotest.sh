#!/usr/bin/env bash
# Runs the Go tests with the race detector and prints one summary line,
# "N passed, N failed, N skipped", counting every test and subtest. Extra
# arguments go to `go test` (e.g. -run, -short). Exit status is go test's.
set -uo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
go test -race -count=1 -v "$@" ./... 2>&1 | tee "$log" | grep -E -- '^(---|ok|FAIL|panic|\s+--- (FAIL|SKIP))|^\s+\S+_test\.go:[0-9]+:|^\s+(Error|Messages|expected|actual)\s*:?' 
rc=${PIPESTATUS[0]}
passed=$(grep -cE -- '^\s*--- PASS' "$log")
failed=$(grep -cE -- '^\s*--- FAIL' "$log")
skipped=$(grep -cE -- '^\s*--- SKIP' "$log")
if [ "$rc" != 0 ] && [ "$failed" = 0 ]; then
	failed=1 # a build failure or panic outside any test still fails the run
fi
if [ "$failed" != 0 ]; then
	# The filter above keeps the assertion lines but not what follows them
	# (the error text, a command's stderr): show each failed test whole.
	echo "---- output of the failed tests (at most 200 lines each) ----"
	grep -oE -- '--- FAIL: [^ ]+' "$log" | awk '{print $3}' | grep -v / | sort -u | while read -r name; do
		awk -v n="$name" '$0 == "=== RUN   " n {p = 1; c = 0} p && c++ < 200 {print} p && index($0, "--- FAIL: " n " (") {p = 0}' "$log"
	done
fi
echo "$passed passed, $failed failed, $skipped skipped"
exit "$rc"

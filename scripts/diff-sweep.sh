#!/usr/bin/env bash
# Runs fast drop's differential tests (kernel program against the Go model)
# over many seeds: CI runs one fixed seed, and some bugs need a sequence of
# rule sets only other seeds draw (session 3's stale tbl24 entries showed up
# with seeds 1 and 2 only). Usage: scripts/diff-sweep.sh [FIRST [LAST
# [FRAMES]]], defaults 1 50 300000. Prints one line per seed, the first
# disagreement of each failing seed, and exits non-zero if any failed. Needs
# root (BPF_PROG_TEST_RUN), like `make test`.
set -uo pipefail
first=${1:-1} last=${2:-50} frames=${3:-300000}
bin=$(mktemp)
out=$(mktemp)
trap 'rm -f "$bin" "$out"' EXIT
go test -c -o "$bin" ./fastdrop/ || exit 1
cd fastdrop || exit 1
failed=()
for seed in $(seq "$first" "$last"); do
	if "$bin" -test.count=1 -test.run 'TestDifferential$|TestIncrementalDifferential$' \
		-fastdrop.seed "$seed" -fastdrop.frames "$frames" >"$out" 2>&1; then
		echo "seed $seed: ok"
	else
		echo "seed $seed: FAIL"
		grep -m 12 -E -- '--- FAIL|_test\.go:[0-9]+:|^\s+frame ' "$out" | sed 's/^/    /'
		failed+=("$seed")
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "failing seeds: ${failed[*]} (rerun one: go test -run TestDifferential -fastdrop.seed N ./fastdrop/)"
	exit 1
fi
echo "seeds $first-$last: all agree"

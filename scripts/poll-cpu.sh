#!/bin/sh
# poll-cpu.sh: application CPU per frame of `xdpdrop redirect --wait poll
# --action drop` (rxdrop in xsk's poll mode: poll() before every batch),
# for two builds of xdpdrop alternated in one run (docs/BENCHMARKS.md,
# "Poll mode: CPU per frame").
#
# Usage: scripts/poll-cpu.sh OLD NEW [ROUNDS] [SECONDS] [APPCPU] [EXTRA...]
#
# It makes a veth pair with random names (the sending end in a new network
# namespace), runs redirect pinned to APPCPU (default 1: a core of its own)
# and `xdpdrop gen` (of NEW) on CPU 0, reads the redirect process's
# utime+stime (/proc/PID/stat) just before and just after the traffic, and
# divides by the frames it received. Removes the pair on exit. Needs root.
set -eu
OLD=$1 NEW=$2
ROUNDS=${3:-5}
SECS=${4:-3}
APPCPU=${5:-1}
shift 5 2>/dev/null || shift $#
EXTRA="$*"
id=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
host="pch$id" peer="pcp$id" ns="pcns$id"
out=$(mktemp)
cleanup() {
	ip link del "$host" 2>/dev/null || true
	ip netns del "$ns" 2>/dev/null || true
	rm -f "$out"
}
trap cleanup EXIT INT TERM
ip netns add "$ns"
ip link add "$host" type veth peer name "$peer" netns "$ns"
ip link set "$host" up
ip -n "$ns" link set "$peer" up
tck=$(getconf CLK_TCK)
ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
r=1
while [ "$r" -le "$ROUNDS" ]; do
	for bin in "$OLD" "$NEW"; do
		# shellcheck disable=SC2086
		taskset -c "$APPCPU" "$bin" redirect --iface "$host" --action drop --wait poll --json \
			--duration "$((SECS + 3))s" $EXTRA >"$out" &
		pid=$!
		sleep 1.5
		t0=$(ticks "$pid")
		taskset -c 0 "$NEW" gen --netns "$ns" --iface "$peer" --batch 256 --duration "${SECS}s" --quiet --json >/dev/null
		sleep 0.2
		t1=$(ticks "$pid")
		wait "$pid"
		tail -n 1 "$out" | jq -r --arg r "$r" --arg b "$bin" --argjson dt "$((t1 - t0))" --argjson tck "$tck" --argjson secs "$SECS" \
			'"\($r)\t\($b)\trx \(.rx_frames / $secs / 1e6 * 100 | round / 100) Mpps\tCPU \($dt / $tck / $secs * 100 | round)%\t\($dt / $tck * 1e9 / .rx_frames | round) ns/frame"'
	done
	r=$((r + 1))
done

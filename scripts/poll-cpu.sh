#!/bin/sh
# poll-cpu.sh: application CPU per frame in poll mode (poll() before every
# batch): `xdpdrop redirect --wait poll --action drop` of two builds of
# xdpdrop, and optionally the kernel's xdpsock (-r -p), alternated in one
# run (docs/BENCHMARKS.md, "Poll mode: CPU per frame").
#
# Usage: [XDPSOCK=/path/to/xdpsock] [RATE=fps] [GENFLAGS=...] scripts/poll-cpu.sh OLD NEW [ROUNDS] [SECONDS] [APPCPU] [REDIRECT FLAGS...]
#
# RATE paces the generator (gen --rate), so that every application is
# measured at the same rate (unpaced, one that falls behind and loses
# frames sleeps less often, which lowers its CPU per frame). Paced, gen
# sends a burst of 50ms worth at line rate every 50ms;
# GENFLAGS="--hold on --call-time 1ms" makes it 1ms worth every 1ms.
#
# It makes a veth pair with random names (the sending end in a new network
# namespace), runs each application pinned to APPCPU (default 1: a core of
# its own; 0 shares the core with the generator and the kernel's receive
# work) and `xdpdrop gen` (of NEW) on CPU 0, reads the CPU time of all the
# application's threads (the first field of /proc/PID/task/*/schedstat,
# in nanoseconds: utime+stime from /proc/PID/stat counts 10 ms ticks, too
# coarse for the 50-200 ms an application uses here) just before and just
# after the traffic, and divides by the frames it received (redirect's
# JSON; xdpsock's own count). Removes the pair on exit. Needs root.
set -eu
OLD=$1 NEW=$2
ROUNDS=${3:-5}
SECS=${4:-3}
APPCPU=${5:-1}
shift 5 2>/dev/null || shift $#
EXTRA="$*"
XDPSOCK=${XDPSOCK:-}
RATE=${RATE:-0}
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
cpuns() { cat /proc/"$1"/task/*/schedstat | awk '{ n += $1 } END { printf "%.0f", n }'; }
report() { # round name frames nanoseconds
	awk -v r="$1" -v n="$2" -v f="$3" -v t="$4" -v s="$SECS" 'BEGIN {
		printf "%d\t%s\trx %.2f Mpps\tCPU %.1f%%\t%.0f ns/frame\n", r, n, f / s / 1e6, t / 1e9 / s * 100, t / f }'
}
set -- "$OLD" "$NEW"
[ -n "$XDPSOCK" ] && set -- "$@" xdpsock
r=1
while [ "$r" -le "$ROUNDS" ]; do
	for app in "$@"; do
		if [ "$app" = xdpsock ]; then
			# stdbuf: its statistics go through stdio, buffered in a file.
			LC_ALL=C taskset -c "$APPCPU" stdbuf -oL "$XDPSOCK" -i "$host" -q 0 -N -c -r -p -x -a >"$out" 2>/dev/null &
		else
			# shellcheck disable=SC2086
			taskset -c "$APPCPU" "$app" redirect --iface "$host" --action drop --wait poll --json \
				--duration "$((SECS + 30))s" $EXTRA >"$out" &
		fi
		pid=$!
		# Under load, redirect's start (loading and attaching) can take
		# longer than a fixed wait: count from its program's attachment.
		i=0
		while ! ip link show "$host" 2>/dev/null | grep -q " xdp" && [ "$i" -lt 300 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		sleep 1
		t0=$(cpuns "$pid")
		# shellcheck disable=SC2086
		taskset -c 0 "$NEW" gen --netns "$ns" --iface "$peer" --batch 256 --rate "$RATE" --duration "${SECS}s" --quiet --json ${GENFLAGS:-} >/dev/null
		# xdpsock prints its totals every second: wait for one after the traffic.
		sleep 1.2
		t1=$(cpuns "$pid")
		if [ "$app" = xdpsock ]; then
			frames=$(awk '$1 == "rx" && NF == 3 { n = $3 } END { print n }' "$out")
			# With -p, xdpsock sees SIGINT only when a frame arrives.
			kill -INT "$pid"
			sleep 1
			kill -KILL "$pid" 2>/dev/null || true
			wait "$pid" || true
			ip link set dev "$host" xdp off 2>/dev/null || true
		else
			# Stopped here rather than by its --duration, which under
			# load could end before the second reading.
			kill -INT "$pid"
			wait "$pid" || true
			frames=$(tail -n 1 "$out" | jq .rx_frames)
		fi
		report "$r" "$app" "$frames" "$((t1 - t0))"
	done
	r=$((r + 1))
done

#!/bin/sh
# gen-compare.sh: how fast `xdpdrop gen` offers frames with its default
# (time-sized live-frames runs in flight) against other sizes and counts
# of runs in flight and fixed chunkings,
# alternating them in one run so that other work on the machine hits every
# variant alike (docs/BENCHMARKS.md, "The generator").
#
# Usage: [OTHER=xdpdrop-build] scripts/gen-compare.sh [XDPDROP] [ROUNDS] [SECONDS]
#
# OTHER adds a row for the default of another build of xdpdrop.
#
# It makes a veth pair with random names (one end in a new network
# namespace), drops everything at the receiving end with fast drop in
# driver mode, runs the generator on CPU 0 from the other end, and removes
# the pair and the namespace on exit. Needs root.
set -eu
XDPDROP=${1:-xdpdrop}
ROUNDS=${2:-5}
SECS=${3:-3}
id=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
host="gch$id" peer="gcp$id" ns="gcns$id"
cleanup() {
	"$XDPDROP" detach --iface "$host" >/dev/null 2>&1 || true
	ip link del "$host" 2>/dev/null || true
	ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT INT TERM
ip netns add "$ns"
ip link add "$host" type veth peer name "$peer" netns "$ns"
ip link set "$host" up
ip -n "$ns" link set "$peer" up
"$XDPDROP" drop --iface "$host" --deny 198.18.0.0/15 --mode driver >/dev/null

# name and gen flags of each variant
# (VARIANTS="name|flags;name|flags..." replaces the list)
set -- \
	"default|" \
	"held, runs of 250ms|--hold on --call-time 250ms" \
	"held, runs of 1s|--hold on --call-time 1s" \
	"not held, 2 in flight, runs of 50ms|--hold off --in-flight 2 --call-time 50ms" \
	"not held, 1 in flight, runs of 1s|--hold off --in-flight 1 --call-time 1s" \
	"fixed 65536 per run, 1 in flight (old)|--hold off --in-flight 1 --chunk 65536" \
	"fixed 1048576 per run, 1 in flight|--hold off --in-flight 1 --chunk 1048576" \
	"fixed 4194304 per run, 1 in flight|--hold off --in-flight 1 --chunk 4194304" \
	"fixed 16777216 per run, 1 in flight|--hold off --in-flight 1 --chunk 16777216"
if [ -n "${VARIANTS:-}" ]; then
	IFS=';'
	# shellcheck disable=SC2086
	set -- $VARIANTS
	unset IFS
fi
if [ -n "${OTHER:-}" ]; then
	set -- "$@" "default of $OTHER|"
fi
r=1
while [ "$r" -le "$ROUNDS" ]; do
	for v in "$@"; do
		name=${v%%|*} flags=${v#*|}
		bin=$XDPDROP
		case $name in "default of "*) bin=$OTHER ;; esac
		# shellcheck disable=SC2086
		taskset -c 0 "$bin" gen --netns "$ns" --iface "$peer" --batch 256 \
			--duration "${SECS}s" --quiet --json $flags |
			jq -r --arg r "$r" --arg n "$name" \
				'"\($r)\t\($n)\t\(.pps / 1e6 * 100 | round / 100) Mpps\tran \(.busy_pct | round)%\tslept \(.idle_pct // 0 | round)%\truns \(.calls)\(if .held then "\theld" else "" end)"' 
	done
	r=$((r + 1))
done

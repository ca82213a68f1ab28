#!/bin/sh
# rings-compare.sh: AF_XDP rxdrop through `xdpdrop redirect` with different
# UMEM and ring sizes, alternated in one run (docs/BENCHMARKS.md, "Ring and
# UMEM sizes").
#
# Usage: scripts/rings-compare.sh [XDPDROP] [ROUNDS] [SECONDS] [APPCPU] [WAIT]
#
# It makes a veth pair with random names (the sending end in a new network
# namespace), runs `xdpdrop redirect --action drop` on the receiving end
# pinned to APPCPU (default 0: the CPU of the generator and of the
# kernel's receive work; 1: a core of its own) and `xdpdrop gen` on CPU 0,
# and removes the pair and the namespace on exit. Needs root.
set -eu
XDPDROP=${1:-xdpdrop}
ROUNDS=${2:-5}
SECS=${3:-3}
APPCPU=${4:-0}
WAIT=${5:-adaptive}
id=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
host="rch$id" peer="rcp$id" ns="rcns$id"
cleanup() {
	ip link del "$host" 2>/dev/null || true
	ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT INT TERM
ip netns add "$ns"
ip link add "$host" type veth peer name "$peer" netns "$ns"
ip link set "$host" up
ip -n "$ns" link set "$peer" up
out=$(mktemp)
trap 'cleanup; rm -f "$out"' EXIT INT TERM

set -- \
	"frames 4096, fill 2048, rx 2048|--frames 4096 --fill-size 2048 --rx-size 2048" \
	"frames 8192, fill 4096, rx 2048|--frames 8192 --fill-size 4096 --rx-size 2048" \
	"frames 8192, fill 4096, rx 4096|--frames 8192 --fill-size 4096 --rx-size 4096" \
	"frames 4096, fill 4096, rx 4096|--frames 4096 --fill-size 4096 --rx-size 4096"
r=1
while [ "$r" -le "$ROUNDS" ]; do
	for v in "$@"; do
		name=${v%%|*} flags=${v#*|}
		# shellcheck disable=SC2086
		taskset -c "$APPCPU" "$XDPDROP" redirect --iface "$host" --action drop --wait "$WAIT" --json \
			--duration "$((SECS + 2))s" $flags >"$out" &
		pid=$!
		sleep 1
		sent=$(taskset -c 0 "$XDPDROP" gen --netns "$ns" --iface "$peer" --batch 256 \
			--duration "${SECS}s" --quiet --json | jq .frames)
		wait "$pid"
		tail -n 1 "$out" | jq -r --arg r "$r" --arg n "$name" --argjson sent "$sent" --argjson secs "$SECS" \
			'"\($r)\t\($n)\trx \(.rx_frames / $secs / 1e6 * 100 | round / 100) Mpps\tsent \($sent / $secs / 1e6 * 100 | round / 100) Mpps\tlost \((1 - .rx_frames / $sent) * 1000 | round / 10)%\tring_full \(.rx_ring_full)\tfill_empty \(.rx_fill_ring_empty)\trx_dropped \(.rx_dropped)"'
	done
	r=$((r + 1))
done

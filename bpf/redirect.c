// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The plain AF_XDP program: every frame of a selected rx queue goes into
 * the XSKMAP entry of that queue, or to the kernel stack (XDP_PASS) when
 * no socket is bound there (bpf_redirect_map's flags argument is the
 * verdict for an empty slot); frames of other queues go to the stack.
 * Every frame is counted per queue and per verdict actually returned.
 *
 * It matches no rules: this is the one-line program of libxdp and
 * xdpsock, for the benchmarks and the examples. Rules that choose which
 * frames go to a socket are the fast-drop matcher's (fastdrop.h: the
 * redirect action and the queue field), which `xdpdrop redirect` uses. */
#include "common.h"

#define XSK_MAX_QUEUES 64

/* Bit q selects rx queue q for redirection; other queues pass everything
 * to the stack. Queues from XSK_MAX_QUEUES up are never selected. */
volatile const __u64 queue_mask = ~0ULL;

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, XSK_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

/* Counters per (queue, verdict): key queue * VERDICT_MAX + verdict. The
 * slot of queue XSK_MAX_QUEUES collects the queues above the limit. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, (XSK_MAX_QUEUES + 1) * VERDICT_MAX);
	__type(key, __u32);
	__type(value, struct counter);
} queue_verdicts SEC(".maps");

static __always_inline int account(__u32 queue, int verdict, __u64 bytes)
{
	__u32 key = (queue < XSK_MAX_QUEUES ? queue : XSK_MAX_QUEUES) * VERDICT_MAX + verdict;
	struct counter *c = bpf_map_lookup_elem(&queue_verdicts, &key);

	if (c)
		count(c, bytes);
	return verdict;
}

/* xdp.frags: runs on devices whose MTU needs frames of several buffers
 * (a veth with MTU 9000 refuses any other program in driver mode); frames
 * are counted at their whole length. A frame longer than a socket's UMEM
 * frame is dropped by the kernel when redirected to a socket not bound
 * for multi-buffer frames, and counted in its rx_dropped. */
SEC("xdp.frags")
int xsk_redirect(struct xdp_md *ctx)
{
	__u32 queue = ctx->rx_queue_index;
	__u64 bytes = bpf_xdp_get_buff_len(ctx);
	int verdict;

	if (queue >= XSK_MAX_QUEUES || !(queue_mask & (1ULL << queue)))
		return account(queue, XDP_PASS, bytes);
	/* XDP_PASS when no socket is bound to this queue's slot. */
	verdict = bpf_redirect_map(&xsks, queue, XDP_PASS);
	if (verdict < 0 || verdict >= VERDICT_MAX)
		verdict = XDP_ABORTED;
	return account(queue, verdict, bytes);
}

char _license[] SEC("license") = "Dual BSD/GPL";

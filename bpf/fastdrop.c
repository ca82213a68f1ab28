// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The fast-drop program: evaluates each frame against the active rule set
 * (fastdrop.h) and drops or passes it, counting per rule and per verdict.
 * Also the kernel LPM-trie program the benchmarks compare against. */
#include "fastdrop.h"

static __always_inline __u32 fd_xdp_action(__u32 act)
{
	/* Redirect has no meaning here; user space never loads it. */
	return act == FD_ACT_DROP ? XDP_DROP : XDP_PASS;
}

/* fd_run is the drop program; with trace (a constant: two programs are
 * made of it) it also prepends a struct fd_trace_rec to the frame, so a
 * test run learns which stage and rule decided. The program that runs on
 * interfaces has none of that: no branch, and no register kept for it. */
static __always_inline int fd_run(struct xdp_md *ctx, const int trace)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	/* The first buffer's length; the parser makes it the whole frame's
	 * when the frame may go on past it (a jumbo frame comes in several
	 * buffers, xdp.frags, and data_end ends the first). */
	__u32 bytes = data_end - data;
	__u32 zero = 0, half, verdict;
	struct xdp_md *volatile ctx_slot = ctx;
	const struct fd_half *volatile h_slot;
	struct fd_main *m;
	struct fd_result r;

	m = bpf_map_lookup_elem(&fd_main, &zero);
	if (!m)
		return XDP_ABORTED;
	/* Read once: every table below comes from this half. */
	half = *(volatile __u32 *)&m->state.active & 1;
	h_slot = &m->half[half];

	r = fd_match(&m->half[half], ctx, &bytes);
	if (bytes & PARSE_LEN_CHECK)
		fd_check_len(&ctx_slot, &h_slot, &bytes, &r);
	verdict = fd_xdp_action(fd_val_action(r.val));

	/* One counter per frame: its slot's action gives the verdict. */
	fd_count(fd_val_slot(r.val), bytes);

	if (trace) {
		struct fd_trace_rec *t;

		if (bpf_xdp_adjust_head(ctx, -(int)sizeof(*t)))
			return verdict;
		t = (void *)(long)ctx->data;
		if ((void *)(t + 1) > (void *)(long)ctx->data_end)
			return verdict;
		t->magic = 0xfd;
		t->verdict = verdict;
		t->class = r.class;
		t->index = r.index;
		t->val = r.val;
	}
	return verdict;
}

/* xdp.frags: loaded with BPF_F_XDP_HAS_FRAGS, so the kernel lets it run on
 * devices whose MTU needs frames of several buffers (a veth with MTU 9000
 * refuses any other program in driver mode) and hands it such frames
 * whole; docs/RULES.md says how they are read. */
SEC("xdp.frags")
int xdp_fastdrop(struct xdp_md *ctx)
{
	return fd_run(ctx, 0);
}

/* Test runs only (fastdrop.Tester): the same, with the trace record. A
 * test run hands a frame longer than a page over in several buffers, as a
 * driver would. */
SEC("xdp.frags")
int xdp_fastdrop_trace(struct xdp_md *ctx)
{
	return fd_run(ctx, 1);
}

/* ---- baseline: the same parser, then the kernel's LPM trie ---- */

struct fd_lpm4_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct fd_lpm6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct fd_lpm4_key);
	__type(value, __u32);
	__uint(max_entries, 1 << 21);
} fd_lpm4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct fd_lpm6_key);
	__type(value, __u32);
	__uint(max_entries, 1 << 21);
} fd_lpm6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct counter);
	__uint(max_entries, VERDICT_MAX);
} fd_lpm_verdicts SEC(".maps");

/* fd_decide_lpm looks the source address up in a kernel LPM trie whose
 * values are vals (as in the prefix tables); malformed frames pass. */
static __always_inline struct fd_result fd_decide_lpm(const void *arg, const struct fd_pkt *p)
{
	struct fd_result r = {};
	__u32 *val = NULL;

	if (p && p->family == 4) {
		struct fd_lpm4_key k = { .prefixlen = 32 };

		*(__u32 *)k.addr = bpf_htonl(p->src4);
		val = bpf_map_lookup_elem(&fd_lpm4, &k);
	} else if (p && p->family == 6) {
		struct fd_lpm6_key k = { .prefixlen = 128 };

		__builtin_memcpy(k.addr, p->src6, 16);
		val = bpf_map_lookup_elem(&fd_lpm6, &k);
	}
	if (val)
		r.val = *val;
	return r;
}

/* xdp_lpm_baseline: the same parser, the kernel's LPM trie for the source
 * address, and a count per verdict. */
SEC("xdp.frags")
int xdp_lpm_baseline(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 bytes = data_end - data;
	struct xdp_md *volatile ctx_slot = ctx;
	struct fd_result r = fd_parse_then(ctx, &bytes, fd_decide_lpm, NULL);
	__u32 verdict;
	struct counter *cnt;

	if (bytes & PARSE_LEN_CHECK) {
		__u32 whole = bpf_xdp_get_buff_len(ctx_slot);

		if ((bytes & ~PARSE_LEN_CHECK) > whole)
			r = fd_decide_lpm(NULL, NULL); /* malformed */
		bytes = whole;
	}
	verdict = fd_xdp_action(fd_val_action(r.val));

	cnt = bpf_map_lookup_elem(&fd_lpm_verdicts, &verdict);
	if (cnt)
		count(cnt, bytes);
	return verdict;
}

char _license[] SEC("license") = "Dual BSD/GPL";

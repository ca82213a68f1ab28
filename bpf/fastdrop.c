// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The fast-drop program: evaluates each frame against the active rule set
 * (fastdrop.h) and drops, passes or redirects it to the AF_XDP socket of
 * its rx queue, counting per rule and per verdict. It is also the
 * redirect program: xdpdrop drop and xdpdrop redirect share it, and its
 * maps, on an interface.
 * The kernel LPM-trie program the benchmarks compare against is in
 * lpmtrie.c, an object of its own. */
#include "fastdrop.h"

/* fd_frame evaluates a frame against half half of m, counts it and returns
 * its verdict; with trace (a constant: two programs are made of it) it
 * also prepends a struct fd_trace_rec to the frame, so a test run learns
 * which stage and rule decided. The program that runs on interfaces has
 * none of that: no branch, and no register kept for it. full (a constant)
 * 0 is the plain path: see fd_run. */
static __always_inline int fd_frame(struct xdp_md *ctx, struct fd_main *m, __u32 half,
				    const int trace, const int full)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	/* The first buffer's length; the parser makes it the whole frame's
	 * when the frame may go on past it (a jumbo frame comes in several
	 * buffers, xdp.frags, and data_end ends the first). */
	__u32 bytes = data_end - data;
	__u32 verdict;
	struct xdp_md *volatile ctx_slot = ctx;
	const struct fd_half *volatile h_slot;
	struct fd_main *volatile m_slot;
	struct fd_result r;

	h_slot = &m->half[half];
	m_slot = m;

	r = fd_match(&m->half[half], ctx, &bytes, full);
	if (bytes & PARSE_LEN_CHECK)
		fd_check_len(&ctx_slot, &h_slot, &bytes, &r);
	/* One counter per frame: its slot's action gives the verdict. */
	fd_count(fd_val_slot(r.val), bytes);
	verdict = fd_xdp_verdict(ctx_slot, fd_val_action(r.val), bytes);

	/* Captures (capture.h): only on the full path, which every frame
	 * takes while one runs. */
	if (!trace && full) {
		const struct fd_main *mm = m_slot;
		__u32 active = *(volatile __u32 *)&mm->cap_active;

		if (active)
			fd_cap_sample(ctx_slot, &mm->cap, r.val,
				      active << 8 | verdict, bytes);
	}

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

/* fd_frame_full is the full path of the program that runs on interfaces,
 * out of line (a BPF-to-BPF call, a few instructions for the frames that
 * take it): clang allocates registers and stack slots over a whole
 * function, so with both paths inlined a change to the full path (the
 * capture hook, a FlowSpec field) reshuffled the plain path's spills too,
 * which moved rows of BenchmarkFastdrop by 1-4 ns either way. Apart, the
 * plain path is the same code whatever the full path holds: a program
 * without capture support has the same xdp_fastdrop (issue 16). */
static __noinline int fd_frame_full(struct xdp_md *ctx, struct fd_main *m, __u32 half)
{
	return fd_frame(ctx, m, half & 1, 0, 1);
}

/* fd_run is the drop program, with trace as for fd_frame. A frame takes
 * the plain path, which has no code for the features of fd_conf.features
 * (the FlowSpec fields, limits, bans, late rules) nor the capture hook,
 * unless the rule set in force uses one of them or a capture runs
 * (FD_FEAT_CAPTURE, which user space keeps in both halves while
 * fd_main.cap_active is not 0; the trace program has no hook). The choice
 * costs every frame one read in a cache line it reads anyway and one
 * predictable branch, where the features' own tests, each paid by every
 * frame before any was used, cost 4-12 ns per frame on this machine
 * (docs/BENCHMARKS.md, issue 14). Both paths are the same code (fd_frame),
 * compiled twice, the full one out of line (fd_frame_full). */
static __always_inline int fd_run(struct xdp_md *ctx, const int trace)
{
	__u32 zero = 0, half, use;
	struct fd_main *m;

	m = bpf_map_lookup_elem(&fd_main, &zero);
	if (!m)
		return XDP_ABORTED;
	/* Read once: every table below comes from this half. This is the
	 * load that pairs with user space's release store of active (the
	 * engine's activeWord): a READ_ONCE, because clang-19 cannot emit
	 * BPF's load-acquire (LLVM 21, Linux 6.15). It is enough: the JIT
	 * makes it a plain load, which x86 orders before later loads, and
	 * every later load of the half is at an address computed from it,
	 * which arm64 and the other weakly ordered CPUs the JITs serve order
	 * too (as rcu_dereference relies on). */
	half = *(volatile __u32 *)&m->state.active & 1;
	use = m->half[half].conf.features;
	if (use) {
		if (trace)
			return fd_frame(ctx, m, half, 1, 1);
		return fd_frame_full(ctx, m, half);
	}
	return fd_frame(ctx, m, half, trace, 0);
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

char _license[] SEC("license") = "Dual BSD/GPL";

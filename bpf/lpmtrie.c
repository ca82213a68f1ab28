// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The baseline fastdrop's benchmarks compare against (BenchmarkLPMTrie):
 * fast drop's frame parser, then the kernel's LPM trie for the source
 * address. Not part of any product: an object of its own, so the
 * production object carries only the drop programs. */
#include "fastdrop.h"

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
	struct fd_result r = fd_parse_then(ctx, &bytes, fd_decide_lpm, NULL, 1);
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

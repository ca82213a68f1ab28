// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The simplest programs: the baselines that benchmarks compare against,
 * the pipeline's first test, and the live-frames traffic generator. */
#include "common.h"

/* Verdict returned by xdp_count; set from Go at load time. */
volatile const __u32 count_verdict = XDP_PASS;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, enum verdict);
	__type(value, struct counter);
	__uint(max_entries, VERDICT_MAX);
} verdicts SEC(".maps");

/* The programs that are attached to interfaces are in xdp.frags sections:
 * loaded with BPF_F_XDP_HAS_FRAGS, they may run where frames come in
 * several buffers (a veth with MTU 9000 refuses any other program in
 * driver mode). */

/* Bare drop: the floor every other program is measured against. */
SEC("xdp.frags")
int xdp_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

/* Bare pass, the other floor. */
SEC("xdp.frags")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

/* Return count_verdict and count the frame under it. Its bytes are those
 * of the first buffer: the whole length of a multi-buffer frame is a
 * helper call, which would make this baseline dearer than a bare count. */
SEC("xdp.frags")
int xdp_count(struct xdp_md *ctx)
{
	__u32 key = count_verdict;
	struct counter *c;

	if (key >= VERDICT_MAX)
		return XDP_ABORTED;
	c = bpf_map_lookup_elem(&verdicts, &key);
	if (c)
		count(c, ctx->data_end - ctx->data);
	return count_verdict;
}

/* TC drop with the same counting as xdp_count: the baseline that shows
 * what XDP gains over the earliest hook that has an skb. */
SEC("tc")
int tc_drop(struct __sk_buff *skb)
{
	__u32 key = VERDICT_DROP;
	struct counter *c = bpf_map_lookup_elem(&verdicts, &key);

	if (c)
		count(c, skb->len);
	return 2; /* TC_ACT_SHOT */
}

/* Traffic generator, run with BPF_PROG_TEST_RUN and
 * BPF_F_TEST_XDP_LIVE_FRAMES on one veth end: every run sends the frame
 * back out of that interface (XDP_TX), so it arrives at the peer.
 *
 * To spread flows, gen_flows > 1 rewrites the low 16 bits of the IPv4
 * source address (and the UDP/TCP source port) to a per-CPU sequence
 * modulo gen_flows, fixing the IPv4 header checksum incrementally.
 * The offsets are set from Go, which built the frame and knows them.
 * Never attached (live-frames test runs take no frame over a page), so a
 * plain xdp section.
 *
 * A frame that carries XDP metadata is dropped, not sent: that is the
 * run pktgen keeps in progress at idle priority so that the program stays
 * in the kernel's XDP dispatcher between the sending runs (each change of
 * the dispatcher waits for an RCU grace period). The sending runs carry
 * no metadata. */
volatile const __u32 gen_flows = 1;
volatile const __u32 gen_ip_off = 14;   /* IPv4 header offset */
volatile const __u32 gen_l4_off = 34;   /* UDP/TCP header offset, 0 = none */
/* Offset of the UDP/TCP checksum within the L4 header (6 UDP, 16 TCP), or
 * 0 to leave it alone (a UDP checksum of 0 means "none" and stays valid). */
volatile const __u32 gen_l4_csum = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} gen_seq SEC(".maps");

/* Frames sent (returned XDP_TX), for pktgen to count what a run that a
 * signal stopped sent. A plain increment: pktgen's runs share one CPU and
 * an XDP test run runs its program with preemption disabled. */
__u64 gen_sent = 0;

static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

SEC("xdp")
int xdp_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	__u64 *seq;
	__u32 ip_off = gen_ip_off, l4_off = gen_l4_off;

	if ((void *)(long)ctx->data_meta < data)
		return XDP_DROP;
	gen_sent++;
	if (gen_flows <= 1)
		return XDP_TX;
	seq = bpf_map_lookup_elem(&gen_seq, &zero);
	if (!seq)
		return XDP_TX;
	__u16 flow = (__u16)(*seq % gen_flows);
	(*seq)++;

	/* Bound the offsets so the verifier can check the accesses. */
	if (ip_off > 64)
		return XDP_TX;
	__u8 *ip = data + ip_off;
	if ((void *)(ip + 20) > data_end)
		return XDP_TX;
	__u16 *saddr_lo = (__u16 *)(ip + 14);
	__u16 *check = (__u16 *)(ip + 10);
	__u16 old = *saddr_lo;
	__u16 new = __builtin_bswap16(flow);
	/* RFC 1624: HC' = ~(~HC + ~m + m') */
	__u32 sum = (__u16)~*check;
	sum += (__u16)~old;
	sum += new;
	*check = ~csum_fold(sum);
	*saddr_lo = new;

	if (!l4_off || l4_off > 128)
		return XDP_TX;
	__u16 *sport = data + l4_off;
	if ((void *)(sport + 1) > data_end)
		return XDP_TX;
	__u16 old_port = *sport;
	__u16 new_port = __builtin_bswap16(1024 + flow);
	*sport = new_port;

	/* The L4 checksum covers the pseudo header's source address and the
	 * source port: adjust it for both changes. */
	__u32 csum_off = gen_l4_csum;
	if (!csum_off || csum_off > 16)
		return XDP_TX;
	__u16 *l4check = data + l4_off + csum_off;
	if ((void *)(l4check + 1) > data_end)
		return XDP_TX;
	if (csum_off == 6 && *l4check == 0)
		return XDP_TX; /* UDP without checksum */
	sum = (__u16)~*l4check;
	sum += (__u16)~old;
	sum += new;
	sum += (__u16)~old_port;
	sum += new_port;
	__u16 folded = ~csum_fold(sum);
	if (csum_off == 6 && folded == 0)
		folded = 0xffff; /* RFC 768: a computed 0 is sent as all ones */
	*l4check = folded;
	return XDP_TX;
}

char _license[] SEC("license") = "Dual BSD/GPL";

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Hands frames to AF_XDP sockets: redirect into the XSKMAP entry of the
 * frame's rx queue, or XDP_PASS to the kernel stack when no socket is bound
 * there (bpf_redirect_map's flags argument is the verdict for an empty
 * slot), when the queue is not selected, or when the queue's filter says
 * so. Every frame is counted per queue and per verdict actually returned.
 *
 * The filter is a small first-match rule list per queue (protocol, source
 * and destination prefixes, source and destination port ranges) with a
 * per-queue default; it is a subset of the fast-drop rule language, kept
 * self-contained so that this program needs nothing but common.h. */
#include "common.h"
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>

#define XSK_MAX_QUEUES 64
#define XSK_MAX_RULES 8

/* Bit q selects rx queue q for redirection; other queues pass everything
 * to the stack. Queues from XSK_MAX_QUEUES up are never selected. */
volatile const __u64 queue_mask = ~0ULL;
/* 0: every frame on a selected queue is redirected, the filters map is
 * not read. 1: the queue's entry in filters decides. */
volatile const __u8 use_filters = 0;

/* What a filter does with a frame. REDIRECT is 0 so that a queue whose
 * filter was never written redirects everything. */
enum xsk_action {
	XSK_ACT_REDIRECT = 0,
	XSK_ACT_PASS = 1,
	XSK_ACT_DROP = 2,
};

/* Fields a rule tests; a rule matches when all of its fields match. */
enum xsk_match {
	XSK_M_PROTO = 1 << 0,
	XSK_M_SRC = 1 << 1,
	XSK_M_DST = 1 << 2,
	XSK_M_SPORT = 1 << 3,
	XSK_M_DPORT = 1 << 4,
	XSK_M_IPV4 = 1 << 5, /* frame must be IPv4 (set with SRC/DST v4) */
	XSK_M_IPV6 = 1 << 6, /* frame must be IPv6 */
};

/* One rule. Addresses are in network order, already masked; the masks are
 * precomputed in Go so the program only ANDs and compares. An IPv4 address
 * sits in word 0 with words 1..3 zero in both address and mask. */
struct xsk_rule {
	enum xsk_match match;   /* bits of enum xsk_match */
	enum xsk_action action;
	__u32 src[4];
	__u32 src_mask[4];
	__u32 dst[4];
	__u32 dst_mask[4];
	__u16 sport_lo, sport_hi; /* host order, inclusive */
	__u16 dport_lo, dport_hi;
	__u8 proto;
	__u8 pad[3];
};

struct xsk_filter {
	__u32 nrules;    /* rules[0..nrules) are evaluated in order */
	enum xsk_action dflt; /* when no rule matches */
	struct xsk_rule rules[XSK_MAX_RULES];
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, XSK_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XSK_MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct xsk_filter);
} filters SEC(".maps");

/* Counters per (queue, verdict): key queue * VERDICT_MAX + verdict. The
 * slot of queue XSK_MAX_QUEUES collects the queues above the limit. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, (XSK_MAX_QUEUES + 1) * VERDICT_MAX);
	__type(key, __u32);
	__type(value, struct counter);
} queue_verdicts SEC(".maps");

/* What the parser learned about a frame. */
struct pkt {
	__u32 src[4], dst[4];
	__u16 sport, dport;
	__u8 proto;
	__u8 family; /* 0 = not IP (or unreadable), 4, 6 */
	__u8 has_ports;
};

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

/* Reads Ethernet (up to two VLAN tags), IPv4 or IPv6 (no extension
 * headers followed: the next header is the protocol) and the ports of TCP
 * and UDP. A frame it cannot read is left with family 0 and matches only
 * rules that test nothing. */
static __always_inline void parse(void *data, void *data_end, struct pkt *p)
{
	struct ethhdr *eth = data;
	void *pos = eth + 1;
	__u16 proto;
	int i;

	if (pos > data_end)
		return;
	proto = eth->h_proto;
#pragma unroll
	for (i = 0; i < 2; i++) {
		struct vlan_hdr *v = pos;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if ((void *)(v + 1) > data_end)
			return;
		proto = v->proto;
		pos = v + 1;
	}
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = pos;
		__u32 hl;

		if ((void *)(ip + 1) > data_end || ip->version != 4)
			return;
		hl = ip->ihl * 4;
		if (hl < sizeof(*ip))
			return;
		p->family = 4;
		p->proto = ip->protocol;
		p->src[0] = ip->saddr;
		p->dst[0] = ip->daddr;
		if (ip->frag_off & bpf_htons(0x1fff))
			return; /* not the first fragment: no L4 header */
		pos += hl;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = pos;

		if ((void *)(ip6 + 1) > data_end || ip6->version != 6)
			return;
		p->family = 6;
		p->proto = ip6->nexthdr;
		__builtin_memcpy(p->src, &ip6->saddr, 16);
		__builtin_memcpy(p->dst, &ip6->daddr, 16);
		pos = ip6 + 1;
	} else {
		return;
	}
	if (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) {
		__be16 *ports = pos;

		if ((void *)(ports + 2) > data_end)
			return;
		p->sport = bpf_ntohs(ports[0]);
		p->dport = bpf_ntohs(ports[1]);
		p->has_ports = 1;
	}
}

static __always_inline int addr_match(const __u32 *a, const __u32 *want, const __u32 *mask)
{
	return ((a[0] & mask[0]) == want[0]) & ((a[1] & mask[1]) == want[1]) &
	       ((a[2] & mask[2]) == want[2]) & ((a[3] & mask[3]) == want[3]);
}

static __always_inline int rule_match(const struct xsk_rule *r, const struct pkt *p)
{
	__u32 m = r->match;

	if ((m & XSK_M_IPV4) && p->family != 4)
		return 0;
	if ((m & XSK_M_IPV6) && p->family != 6)
		return 0;
	if ((m & (XSK_M_PROTO | XSK_M_SRC | XSK_M_DST)) && !p->family)
		return 0;
	if ((m & XSK_M_PROTO) && p->proto != r->proto)
		return 0;
	if ((m & XSK_M_SRC) && !addr_match(p->src, r->src, r->src_mask))
		return 0;
	if ((m & XSK_M_DST) && !addr_match(p->dst, r->dst, r->dst_mask))
		return 0;
	if (m & (XSK_M_SPORT | XSK_M_DPORT)) {
		if (!p->has_ports)
			return 0;
		if ((m & XSK_M_SPORT) && (p->sport < r->sport_lo || p->sport > r->sport_hi))
			return 0;
		if ((m & XSK_M_DPORT) && (p->dport < r->dport_lo || p->dport > r->dport_hi))
			return 0;
	}
	return 1;
}

/* filter returns the queue filter's action for the frame. */
static __always_inline __u32 filter(__u32 queue, void *data, void *data_end)
{
	struct xsk_filter *f = bpf_map_lookup_elem(&filters, &queue);
	struct pkt p = {};
	__u32 i, n;

	if (!f)
		return XSK_ACT_PASS;
	n = f->nrules;
	if (!n)
		return f->dflt;
	parse(data, data_end, &p);
	for (i = 0; i < XSK_MAX_RULES; i++) {
		if (i >= n)
			break;
		if (rule_match(&f->rules[i], &p))
			return f->rules[i].action;
	}
	return f->dflt;
}

static __always_inline int account(__u32 queue, int verdict, __u64 bytes)
{
	__u32 key = (queue < XSK_MAX_QUEUES ? queue : XSK_MAX_QUEUES) * VERDICT_MAX + verdict;
	struct counter *c = bpf_map_lookup_elem(&queue_verdicts, &key);

	if (c)
		count(c, bytes);
	return verdict;
}

/* xdp.frags: runs on devices whose MTU needs frames of several buffers
 * (a veth with MTU 9000 refuses any other program in driver mode). The
 * filter reads headers from the first buffer only, which always holds
 * them (it follows no IPv6 extension headers); frames are counted at
 * their whole length. A frame longer than a
 * socket's UMEM frame is dropped by the kernel when redirected to a socket
 * not bound for multi-buffer frames, and counted in its rx_dropped. */
SEC("xdp.frags")
int xsk_redirect(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 queue = ctx->rx_queue_index;
	__u64 bytes = bpf_xdp_get_buff_len(ctx);
	int verdict;

	if (queue >= XSK_MAX_QUEUES || !(queue_mask & (1ULL << queue)))
		return account(queue, XDP_PASS, bytes);
	if (use_filters) {
		switch (filter(queue, data, data_end)) {
		case XSK_ACT_REDIRECT:
			break;
		case XSK_ACT_DROP:
			return account(queue, XDP_DROP, bytes);
		default:
			return account(queue, XDP_PASS, bytes);
		}
	}
	/* XDP_PASS when no socket is bound to this queue's slot. */
	verdict = bpf_redirect_map(&xsks, queue, XDP_PASS);
	if (verdict < 0 || verdict >= VERDICT_MAX)
		verdict = XDP_ABORTED;
	return account(queue, verdict, bytes);
}

char _license[] SEC("license") = "Dual BSD/GPL";

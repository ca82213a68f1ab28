/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Frame parsers in the style of xdp-tools' parsing_helpers.h: a header
 * cursor, one __always_inline function per header, each returning the next
 * protocol or -1 for a malformed frame, with every bounds check written the
 * way the verifier follows it (pointer + size compared against data_end).
 *
 * The semantics are the contract of docs/RULES.md ("Parsing of frames"),
 * which the Go model (fastdrop/model.go) implements independently: "present"
 * always means present before data_end, never within the IP total length. */
#ifndef XDPDROP_PARSING_H
#define XDPDROP_PARSING_H

#include <linux/types.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif

/* Limits of the parser; the Go model has the same (MaxVLANTags,
 * MaxIPv6ExtHeaders). A frame beyond them is malformed. */
#define PARSE_MAX_VLAN 2
#define PARSE_MAX_IPV6_EXT 4

/* Multi-buffer frames: set in *hdr_cursor.len by a parser that could not
 * check a length against the first buffer alone (see frame_beyond). */
#define PARSE_LEN_CHECK (1u << 31)

/* pos is where the next header starts. Headers are read only before
 * data_end, the end of the frame's first buffer (its linear part); length
 * fields are checked against the whole frame, which in a multi-buffer
 * frame (xdp.frags) goes on beyond data_end. *len comes in as the first
 * buffer's length. Reading the whole length is a helper call (a few ns
 * here), and a call in the parser makes clang spill the parser's values on
 * every frame's path, so the parser makes none: a length field that
 * reaches past the first buffer sets PARSE_LEN_CHECK in *len with the
 * length the frame needs (frame_beyond), and the caller, after deciding,
 * reads the whole length and judges the frame malformed if it falls short. */
struct hdr_cursor {
	void *pos;
	__u32 *len;
};

/* frame_beyond records that n bytes from the cursor reach past the first
 * buffer, which ends at data_end: the frame must be (first buffer) +
 * (the excess) bytes long. */
static __always_inline void frame_beyond(struct hdr_cursor *nh, void *data_end, __u32 n)
{
	__u32 first = *nh->len & ~PARSE_LEN_CHECK;
	/* pos - data_end as a 64-bit difference of pointers (a scalar):
	 * left to itself clang computes the 32-bit sum on the pointers,
	 * which the verifier refuses. */
	long back = nh->pos - data_end;

	asm volatile("" : "+r"(back));
	*nh->len = (first + (__u32)(back + n)) | PARSE_LEN_CHECK;
}

struct vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

/* IPv6 fragment header (RFC 8200 4.5). */
struct ipv6_frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; /* offset in 8-byte units << 3 | flags */
	__be32 identification;
};

static __always_inline int proto_is_vlan(__u16 h_proto)
{
	return h_proto == bpf_htons(ETH_P_8021Q) || h_proto == bpf_htons(ETH_P_8021AD);
}

/* parse_ethhdr skips the Ethernet header and up to PARSE_MAX_VLAN tags
 * (802.1Q or 802.1ad, any order) and returns the EtherType after them in
 * host order. A third tag, or a header cut short, is malformed (-1). */
static __always_inline int parse_ethhdr(struct hdr_cursor *nh, void *data_end)
{
	struct ethhdr *eth = nh->pos;
	struct vlan_hdr *vlh;
	__u16 h_proto;
	int i;

	if ((void *)(eth + 1) > data_end)
		return -1;
	nh->pos = eth + 1;
	/* One 16-bit load: struct ethhdr is packed, so eth->h_proto would
	 * be read a byte at a time. */
	h_proto = *(__be16 *)((void *)eth + 12);

#pragma unroll
	for (i = 0; i < PARSE_MAX_VLAN; i++) {
		if (!proto_is_vlan(h_proto))
			break;
		vlh = nh->pos;
		if ((void *)(vlh + 1) > data_end)
			return -1;
		h_proto = vlh->encap_proto;
		nh->pos = vlh + 1;
	}
	if (proto_is_vlan(h_proto))
		return -1;
	return bpf_ntohs(h_proto);
}

/* parse_iphdr checks an IPv4 header (version, IHL >= 5, the whole header
 * present in the first buffer, IHL*4 <= total length <= bytes to the end of
 * the frame), leaves
 * the cursor after the options and returns the protocol, or -1. */
static __always_inline int parse_iphdr(struct hdr_cursor *nh, void *data_end,
				       struct iphdr **iphdr)
{
	struct iphdr *iph = nh->pos;
	__u32 hdrsize, tot, vihl;

	if ((void *)(iph + 1) > data_end)
		return -1;
	vihl = *(__u8 *)iph;
	if (vihl == 0x45) {
		/* Version 4 without options, nearly every packet: one test. */
		hdrsize = sizeof(*iph);
	} else {
		if (vihl >> 4 != 4)
			return -1;
		hdrsize = (vihl & 0xf) * 4;
		if (hdrsize < sizeof(*iph))
			return -1;
		if (nh->pos + hdrsize > data_end)
			return -1;
	}
	tot = bpf_ntohs(iph->tot_len);
	if (tot < hdrsize)
		return -1;
	if (nh->pos + tot > data_end)
		frame_beyond(nh, data_end, tot);
	nh->pos += hdrsize;
	*iphdr = iph;
	return iph->protocol;
}

/* parse_ip6hdr checks the fixed IPv6 header (present in the first buffer,
 * version, 40 + payload length <= bytes to the end of the frame) and
 * returns the next header, or -1. */
static __always_inline int parse_ip6hdr(struct hdr_cursor *nh, void *data_end,
					struct ipv6hdr **ip6hdr)
{
	struct ipv6hdr *ip6h = nh->pos;

	if ((void *)(ip6h + 1) > data_end)
		return -1;
	if (ip6h->version != 6)
		return -1;
	if ((void *)(ip6h + 1) + bpf_ntohs(ip6h->payload_len) > data_end)
		frame_beyond(nh, data_end, sizeof(*ip6h) + bpf_ntohs(ip6h->payload_len));
	nh->pos = ip6h + 1;
	*ip6hdr = ip6h;
	return ip6h->nexthdr;
}

/* A packet's fragment bits, as FlowSpec's fragment component (RFC 8955
 * 4.2.2.12, RFC 8956 3.6) has them, plus two of our own: DF (IPv4 only),
 * NF (IsF: a fragment other than the first, offset != 0), FF (the first
 * fragment: offset 0, more fragments), LF (the last fragment: offset != 0,
 * no more fragments), ANY (a fragment: offset != 0 or more fragments),
 * V6 (an IPv6 packet, which has no DF bit). */
#define PARSE_FRAG_DF 0x01
#define PARSE_FRAG_NF 0x02
#define PARSE_FRAG_FF 0x04
#define PARSE_FRAG_LF 0x08
#define PARSE_FRAG_ANY 0x10
#define PARSE_FRAG_V6 0x20

/* frag_bits: the bits of a fragment offset (13 bits) and more-fragments
 * flag. */
static __always_inline __u8 frag_bits(__u32 off, __u32 more)
{
	if (off)
		return PARSE_FRAG_NF | PARSE_FRAG_ANY | (more ? 0 : PARSE_FRAG_LF);
	return more ? PARSE_FRAG_FF | PARSE_FRAG_ANY : 0;
}

static __always_inline int ipv6_is_ext(__u8 nh)
{
	switch (nh) {
	case IPPROTO_HOPOPTS:
	case IPPROTO_ROUTING:
	case IPPROTO_FRAGMENT:
	case IPPROTO_AH:
	case IPPROTO_DSTOPTS:
		return 1;
	}
	return 0;
}

/* skip_ip6hdrext follows at most PARSE_MAX_IPV6_EXT extension headers
 * (hop-by-hop, routing, destination options, fragment, AH), each of which
 * must be present in full, and returns the first next-header value that is
 * not one of them; a fifth extension header is malformed (-1). What follows
 * a fragment header with a non-zero offset is fragment data, not headers:
 * the walk stops there and returns that header's next header. *fragbits
 * comes in as PARSE_FRAG_V6 and gets the fragment header's bits
 * (frag_bits; PARSE_FRAG_NF for a non-first fragment). */
static __always_inline int skip_ip6hdrext(struct hdr_cursor *nh, void *data_end,
					  __u8 next_hdr, __u8 *fragbits)
{
	int i;

#pragma unroll
	for (i = 0; i <= PARSE_MAX_IPV6_EXT; i++) {
		__u8 *hdr = nh->pos;
		__u32 len;

		if (!ipv6_is_ext(next_hdr))
			return next_hdr;
		if (i == PARSE_MAX_IPV6_EXT)
			return -1;

		if (next_hdr == IPPROTO_FRAGMENT) {
			struct ipv6_frag_hdr *fh = nh->pos;

			if ((void *)(fh + 1) > data_end)
				return -1;
			nh->pos = fh + 1;
			next_hdr = fh->nexthdr;
			*fragbits = PARSE_FRAG_V6 | frag_bits(bpf_ntohs(fh->frag_off) >> 3,
							      bpf_ntohs(fh->frag_off) & 1);
			if (*fragbits & PARSE_FRAG_NF)
				return next_hdr;
			continue;
		}
		if ((void *)(hdr + 2) > data_end)
			return -1;
		if (next_hdr == IPPROTO_AH)
			len = ((__u32)hdr[1] + 2) * 4;
		else
			len = ((__u32)hdr[1] + 1) * 8;
		if (nh->pos + len > data_end)
			return -1;
		next_hdr = hdr[0];
		nh->pos += len;
	}
	return -1;
}

#endif /* XDPDROP_PARSING_H */

/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Definitions shared by every xdpdrop BPF program and, through bpf2go
 * -type, by the Go side. Nothing here is re-declared by hand in Go. */
#ifndef XDPDROP_COMMON_H
#define XDPDROP_COMMON_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Packets and bytes, as kept per CPU in the kernel and summed in Go. */
struct counter {
	__u64 packets;
	__u64 bytes;
};

/* Index of struct counter in per-verdict counter arrays; the values are
 * the kernel's XDP action codes so a verdict indexes its own slot. */
enum verdict {
	VERDICT_ABORTED = XDP_ABORTED,
	VERDICT_DROP = XDP_DROP,
	VERDICT_PASS = XDP_PASS,
	VERDICT_TX = XDP_TX,
	VERDICT_REDIRECT = XDP_REDIRECT,
	VERDICT_MAX,
};

/* Per-CPU array maps need no atomics: each CPU only ever touches its own
 * copy, and an XDP program is not preempted on its CPU. */
static __always_inline void count(struct counter *c, __u64 bytes)
{
	c->packets++;
	c->bytes += bytes;
}

#endif /* XDPDROP_COMMON_H */

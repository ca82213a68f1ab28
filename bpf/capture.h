/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Samples of frames and their verdicts, for `xdpdrop capture` (Go:
 * package capture). A capture registers a selection (verdicts, a rule, an
 * rx queue, 1 in N, at most N per second, a snap length) in one of
 * FD_CAP_SLOTS slots of struct fd_cap_ctl and a BPF ring buffer of its own
 * in fd_cap_rings at the same index; fd_cap_sample copies each frame that a
 * slot selects into that slot's ring.
 *
 * The program tests one word (fd_main's cap_active: a bit per slot in use)
 * after the verdict is known, and calls fd_cap_sample only when it is not
 * zero: with no capture running that is the whole cost. The data path
 * never waits: a full ring loses the sample, which is counted, and the
 * frame's verdict is whatever it was. */
#ifndef XDPDROP_CAPTURE_H
#define XDPDROP_CAPTURE_H

/* Included by fastdrop.h, after its layout enums and struct fd_result. */

enum fd_cap_layout {
	FD_CAP_SLOTS = 8,        /* captures at once */
	FD_CAP_SNAP_MAX = 9216,  /* largest snap length: a jumbo frame */
	FD_CAP_RING = 1 << 21,   /* bytes of each capture's ring */

	/* fd_cap_sel.verdicts: the frame's XDP action as 1 << action
	 * (XDP_DROP 1, XDP_PASS 2, XDP_REDIRECT 4), and FD_CAP_V_MALFORMED
	 * for a frame the parser refused, whatever its verdict. */
	FD_CAP_V_DROP = 1 << 1,
	FD_CAP_V_PASS = 1 << 2,
	FD_CAP_V_REDIRECT = 1 << 4,
	FD_CAP_V_MALFORMED = 1 << 8,
};

/* One capture's selection, written by that capture while its bit in
 * cap_active is clear, read by the program while it is set. */
struct fd_cap_sel {
	__u32 nonce;    /* new for each registration; samples and per-CPU state carry it */
	__u32 verdicts; /* FD_CAP_V_* bits; 0: every frame */
	__u32 slot;     /* counter slot of the rule; 0: any rule or none */
	__u32 queue;    /* rx queue + 1; 0: every queue */
	__u32 every;    /* send 1 in every selected frames (per CPU); 0 or 1: each */
	__u32 per_sec;  /* at most this many samples per second per CPU; 0: no limit */
	__u32 snaplen;  /* bytes of each frame to send: 1..FD_CAP_SNAP_MAX */
	__u32 owner;    /* process id of the capture (user space only) */
};

/* The capture slots, in fd_main at FD_MAIN_CAP. */
struct fd_cap_ctl {
	__u32 claimed; /* user space only: bit i, slot i is taken */
	__u32 pad[15];
	struct fd_cap_sel sel[FD_CAP_SLOTS];
};

/* Per CPU and capture slot, reset whenever the slot's nonce changes. */
struct fd_cap_cnt {
	__u64 seen; /* frames the selection picked */
	__u64 sent; /* samples written to the ring */
	__u64 lost; /* samples the full ring refused */
	__u64 win;  /* start of the current second (per_sec) */
	__u32 nwin; /* samples sent in it */
	__u32 skip; /* frames still to skip (every) */
	__u32 nonce;
	__u32 pad;
};

/* What each sample in a ring starts with; caplen bytes of the frame
 * follow. */
struct fd_cap_rec {
	__u64 tstamp;  /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	__u32 len;     /* the frame's length */
	__u32 caplen;  /* bytes of it that follow */
	__u32 val;     /* the match result: action and counter slot */
	__u32 nonce;   /* of the registration it was sent for */
	__u32 cpu;
	__u32 queue;   /* rx queue */
	__u8 verdict;  /* XDP action returned */
	__u8 class;    /* enum fd_class */
	__u8 flags;
	__u8 pad[5];
};

/* Each CPU's counters and the buffer a sample is put together in before
 * it is copied into a ring (a ring record's size must be a constant; this
 * way a sample takes only its own length). */
struct fd_cap_cpu {
	struct fd_cap_cnt cnt[FD_CAP_SLOTS];
	struct fd_cap_rec rec;
	__u8 data[FD_CAP_SNAP_MAX];
};

/* By CPU (max_entries set from Go at load). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct fd_cap_cpu);
	__uint(max_entries, 1);
} fd_cap_cpu SEC(".maps");

struct fd_cap_ring {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, FD_CAP_RING);
};

/* Each capture's ring, by slot: made and put here by the capture. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, FD_CAP_SLOTS);
	__type(key, __u32);
	__array(values, struct fd_cap_ring);
} fd_cap_rings SEC(".maps");

/* fd_cap_one sends the frame to capture slot i if its selection takes
 * it. bits: the frame's FD_CAP_V_* bits. */
static __always_inline void fd_cap_one(struct xdp_md *ctx, const struct fd_cap_sel *sel,
				       struct fd_cap_cpu *pc, __u32 i, __u32 bits, __u32 val,
				       __u32 class, __u32 verdict, __u32 len)
{
	struct fd_cap_cnt *c = &pc->cnt[i & (FD_CAP_SLOTS - 1)];
	__u32 nonce = sel->nonce, caplen;
	void *ring;

	if (sel->verdicts && !(sel->verdicts & bits))
		return;
	if (sel->slot && sel->slot != (val & FD_VAL_SLOT_MASK))
		return;
	if (sel->queue && sel->queue != ctx->rx_queue_index + 1)
		return;
	if (c->nonce != nonce) {
		/* A new registration in this slot: its own counts. */
		c->seen = c->sent = c->lost = c->win = 0;
		c->nwin = c->skip = 0;
		c->nonce = nonce;
	}
	c->seen++;
	if (c->skip) {
		c->skip--;
		return;
	}
	if (sel->every > 1)
		c->skip = sel->every - 1;
	if (sel->per_sec) {
		__u64 now = bpf_ktime_get_ns();

		if (now - c->win >= 1000000000ULL) {
			c->win = now;
			c->nwin = 0;
		}
		if (c->nwin >= sel->per_sec)
			return;
		c->nwin++;
	}
	ring = bpf_map_lookup_elem(&fd_cap_rings, &i);
	if (!ring)
		return;
	caplen = sel->snaplen < len ? sel->snaplen : len;
	if (caplen > FD_CAP_SNAP_MAX)
		caplen = FD_CAP_SNAP_MAX;
	if (caplen == 0 || bpf_xdp_load_bytes(ctx, 0, pc->data, caplen) < 0)
		caplen = 0;
	pc->rec.tstamp = bpf_ktime_get_ns();
	pc->rec.len = len;
	pc->rec.caplen = caplen;
	pc->rec.val = val;
	pc->rec.nonce = nonce;
	pc->rec.cpu = bpf_get_smp_processor_id();
	pc->rec.queue = ctx->rx_queue_index;
	pc->rec.verdict = verdict;
	pc->rec.class = class;
	pc->rec.flags = 0;
	if (bpf_ringbuf_output(ring, &pc->rec, sizeof(pc->rec) + (caplen & 0x3fff), 0))
		c->lost++;
	else
		c->sent++;
}

/* fd_cap_sample offers a frame whose verdict is known to every capture
 * whose bit is set in active (struct fd_main's cap_active, read by the
 * caller). A global function: verified once, and the program's path
 * without captures carries none of it. BPF passes at most five arguments:
 * how is active << 8 | XDP verdict. The stage that decided follows from
 * val's counter slot (FD_SLOT_*), which keeps the caller from carrying it
 * in a register through the match. Returns 0. */
__noinline int fd_cap_sample(struct xdp_md *ctx, const struct fd_cap_ctl *cap, __u32 val,
			     __u32 how, __u32 len)
{
	__u32 cpu = bpf_get_smp_processor_id(), bits, i;
	__u32 active = how >> 8, verdict = how & 0xff, slot = val & FD_VAL_SLOT_MASK, class;
	struct fd_cap_cpu *pc;

	if (!ctx || !cap)
		return 0;
	pc = bpf_map_lookup_elem(&fd_cap_cpu, &cpu);
	if (!pc)
		return 0;
	bits = 1u << (verdict & 7);
	if (slot < FD_SLOT_DEFAULT) {
		class = FD_CLASS_MALFORMED;
		bits |= FD_CAP_V_MALFORMED;
	} else if (slot < FD_SLOT_RULES) {
		class = FD_CLASS_DEFAULT;
	} else {
		class = 0; /* a rule's: compound or prefix, the rule says */
	}
	for (i = 0; i < FD_CAP_SLOTS; i++) {
		if (active & (1u << i))
			fd_cap_one(ctx, &cap->sel[i], pc, i, bits, val, class, verdict, len);
	}
	return 0;
}

#endif /* XDPDROP_CAPTURE_H */

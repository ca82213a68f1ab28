/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Samples of frames and their verdicts, for `xdpdrop capture` (Go:
 * package capture). A capture registers a selection (verdicts, a rule, an
 * rx queue, 1 in N, at most N per second, a snap length) in one of
 * FD_CAP_SLOTS slots of struct fd_cap_ctl and a BPF ring buffer of its own
 * in fd_cap_rings at the same index; fd_cap_sample copies each frame that a
 * slot selects into that slot's ring.
 *
 * The program's full path tests one word (fd_main's cap_active: a bit per
 * slot in use, and FD_CAP_RULES while a rule has a sample modifier) after
 * the verdict is known, and calls fd_cap_sample (fastdrop.h) only when it
 * is not zero. While it is not zero, FD_FEAT_CAPTURE in both halves'
 * fd_conf.features sends every frame down the full path; with no capture
 * running a frame of a rule set that needs no other feature takes the
 * plain path, which has no capture code at all. A rule's sample
 * modifier sends 1 in N of its frames to fd_cap_samples, a ring that
 * exists with the program, so the samples wait there for whoever reads
 * them (`xdpdrop capture --rule-samples`). The data path
 * never waits: a full ring loses the sample, which is counted, and the
 * frame's verdict is whatever it was. */
#ifndef XDPDROP_CAPTURE_H
#define XDPDROP_CAPTURE_H

/* Included by fastdrop.h, after its layout enums and struct fd_result. */

enum fd_cap_layout {
	FD_CAP_SLOTS = 8,        /* captures at once */
	FD_CAP_SNAP_MAX = 9216,  /* largest snap length: a jumbo frame */
	FD_CAP_RING = 1 << 21,   /* bytes of each capture's ring */
	FD_CAP_RULE_SNAP = 2048, /* snap length of rules' samples */

	/* fd_cap_sel.verdicts: the frame's XDP action as 1 << action
	 * (XDP_DROP 1, XDP_PASS 2, XDP_REDIRECT 4), and FD_CAP_V_MALFORMED
	 * for a frame the parser refused, whatever its verdict. */
	FD_CAP_V_DROP = 1 << 1,
	FD_CAP_V_PASS = 1 << 2,
	FD_CAP_V_REDIRECT = 1 << 4,
	FD_CAP_V_MALFORMED = 1 << 8,

	/* cap_active: a rule of the set in force has a sample modifier. */
	FD_CAP_RULES = 1 << 15,
	/* fd_cap_rec.flags: sent by a rule's sample modifier. */
	FD_CAP_F_RULE = 1,
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
	__u64 rule_sent; /* samples of rules' sample modifiers */
	__u64 rule_lost; /* the same that a full fd_cap_samples refused */
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

/* The samples of rules' sample modifiers: made with the program. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, FD_CAP_RING);
} fd_cap_samples SEC(".maps");

/* Each capture's ring, by slot: made and put here by the capture. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, FD_CAP_SLOTS);
	__type(key, __u32);
	__array(values, struct fd_cap_ring);
} fd_cap_rings SEC(".maps");

#endif /* XDPDROP_CAPTURE_H */

/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The fast-drop matcher: maps, layouts shared with Go (through bpf2go
 * -type) and the per-packet evaluation as __always_inline functions, so
 * that any XDP program (the drop program in fastdrop.c, a per-queue filter
 * in front of AF_XDP sockets) can include it and act on fd_match()'s result.
 *
 * Evaluation order (docs/RULES.md): malformed -> compound rules (first
 * match in rule-set order) -> longest destination prefix -> longest
 * source prefix -> late compound rules
 * (the redirect command's, fd_conf.late_from) -> default policy. A
 * frame whose action is redirect goes to the AF_XDP socket of its rx
 * queue in fd_xsks (fd_xdp_verdict), or to the stack if none is bound.
 *
 * Every table exists twice ("halves"), or, for the IPv4 group pools, is
 * shared by the halves and changed copy-on-write. Packets read
 * fd_state.active once and use only that half; user space writes the other
 * half, flips active, then waits for an RCU grace period before it touches
 * the old half again. So a packet sees either the old or the new rule set,
 * never parts of both. */
#ifndef XDPDROP_FASTDROP_H
#define XDPDROP_FASTDROP_H

#include "common.h"
#include "parsing.h"

/* Actions, with the values of fastdrop.Action in Go. */
enum fd_action {
	FD_ACT_NONE = 0,
	FD_ACT_DROP = 1,
	FD_ACT_PASS = 2,
	FD_ACT_REDIRECT = 3,
	/* Compound rules only: police the frame (struct fd_police), then
	 * pass what conforms and drop the excess. */
	FD_ACT_LIMIT = 4,
};

/* Which stage decided (fastdrop.ResultClass in Go). */
enum fd_class {
	FD_CLASS_MALFORMED = 1,
	FD_CLASS_COMPOUND = 2,
	FD_CLASS_PREFIX = 3,
	FD_CLASS_DEFAULT = 4,
	FD_CLASS_BAN = 5, /* the source is banned (fd_bans) */
};

/* Compound-rule fields that have lookup tables. */
enum fd_field {
	FD_FLD_ETHER = 0,
	FD_FLD_PROTO = 1,
	FD_FLD_SPORT = 2,
	FD_FLD_DPORT = 3,
	FD_FLD_SRC4 = 4,
	FD_FLD_DST4 = 5,
	FD_FLD_SRC6 = 6,
	FD_FLD_DST6 = 7,
	FD_FLD_TTL = 8,
	FD_FLD_FLAGS = 9,
	FD_FLD_QUEUE = 10,
	FD_FLD_DSCP = 11,
	FD_FLD_TYPE = 12,
	FD_FLD_CODE = 13,
	FD_FLD_LEN = 14,
	FD_FLD_FRAG = 15,
	FD_FLD_PORT = 16,
	FD_FLD_FLOWLABEL = 17,
	FD_FLD_MAX = 18,
	/* Not a field with tables: IPv6 prefixes with an offset (src or dst
	 * ADDR/LEN/OFF, FlowSpec types 1 and 2, RFC 8956 3.1), which the
	 * tries cannot hold: each distinct one is an entry at FD_BM_OFF6 in
	 * fd_cls_half.bm, compared masked (fd_off6_fail). Its bit in fd_conf.fields is
	 * beyond FD_FLD_PLAIN, so such a rule set takes the full path
	 * (FD_FEAT_FIELDS) and the plain path has no code for it. */
	FD_FLD_OFF6 = FD_FLD_MAX,
};

/* The direct fields: compound-rule fields whose value in a frame (8 or 16
 * bits) indexes a table of the field's own, 1 << BITS entries, at
 * FD_DIR_<NAME> in both fd_cls_half.tab (classes, with more than 64
 * compound rules) and fd_cls_half.b64 (bitmaps, with at most 64).
 * X(NAME, MEMBER, BITS, WHEN): the value is struct fd_pkt's MEMBER (masked
 * to BITS), and WHEN says which frames have it and where it is read:
 *   FRONT  ether, proto, dport: folded into the front tables, which an IP
 *          frame reads first (fd_front_ports, fd_front_proto); ether is
 *          read by name for frames that are not IP;
 *   PORTS  TCP and UDP frames that are not non-first fragments;
 *   IP     every IPv4 and IPv6 frame;
 *   ANY    every frame (queue: the rx queue, FD_QUEUES for the queues
 *          above, which no rule's range holds);
 *   EITHER port (FlowSpec type 4, source or destination port): TCP and
 *          UDP frames as PORTS, but looked up at both ports, the rules of
 *          the two ORed; the classifiers read it by name, after the
 *          others (MEMBER is only for the size check).
 * The classifiers (fd_compound, fd_compound64) read the PORTS and IP
 * fields generically, in this order. Each has the entry of the same name
 * in fastdrop/fields.go's matchFields (its direct member: fd_field, FD_DIR_
 * offset, bits), which compiles it; TestDirectFields checks the two
 * against each other. A new one is a line here, its enum fd_field value
 * and its member of struct fd_pkt, which the frame parser sets. */
#define FD_DIRECT_FIELDS(X)            \
	X(ETHER, ethertype, 16, FRONT) \
	X(SPORT, sport, 16, PORTS)     \
	X(DPORT, dport, 16, FRONT)     \
	X(PROTO, proto, 8, FRONT)      \
	X(TTL, ttl, 8, IP)             \
	X(FLAGS, tcpflags, 8, PORTS)   \
	X(QUEUE, queue, 9, ANY)        \
	X(DSCP, dscp, 6, IP)           \
	X(TYPE, icmp_type, 8, IP)      \
	X(CODE, icmp_code, 8, IP)      \
	X(LEN, pktlen, 17, IP)         \
	X(FRAG, fragbits, 6, IP)       \
	X(FLOWLABEL, flowlabel, 20, IP) \
	X(PORT, sport, 16, EITHER)

/* The direct tables' offsets: each table's first entry, then its last
 * (FD_DIR_<NAME>_END), so that the next starts right after it; FD_DIR_END
 * is the entries of all of them. */
enum fd_direct {
#define FD_X_DIR(NAME, MEMBER, BITS, WHEN) \
	FD_DIR_##NAME, FD_DIR_##NAME##_END = FD_DIR_##NAME + (1 << (BITS)) - 1,
	FD_DIRECT_FIELDS(FD_X_DIR)
#undef FD_X_DIR
	FD_DIR_END,
};

enum fd_layout {
	FD_MAX_COMPOUND = 256,
	FD_BM_WORDS = FD_MAX_COMPOUND / 64,
	FD_KINDS = 12, /* family(3) x non-first fragment(2) x has ports(2) */

	/* The version of everything user space writes into the maps and a
	 * later process reads back from their pins: this enum, struct
	 * fd_conf, fd_state, fd_rule_rec, fd_v6_ent, fd_v4_sparse and the
	 * encodings of vals and records. Raise it with any change to them:
	 * the engine stamps it into the maps it creates (struct fd_stamp) and
	 * refuses to open pins stamped with another, so that a new field
	 * never misreads old pins. TestLayoutVersion fails until it is
	 * raised. */
	FD_LAYOUT_VERSION = 24,

	/* Sizes of the records user space reads and writes. */
	FD_REC_SIZE = 160,    /* struct fd_rule_rec */
	FD_ORIGIN_LEN = 16,   /* fd_rule_rec.origin */
	FD_LISTS_SIZE = 1024, /* a value of fd_rule_lists */
	FD_LISTS_MAX = 1024,  /* its entries: 4 x FD_MAX_COMPOUND */
	FD_TEXT_SIZE = 2048,  /* a value of fd_rule_text (as many entries) */
	FD_COUNTER_SIZE = 16, /* struct counter */
	FD_V6_ENT_SIZE = 32,  /* struct fd_v6_ent */

	/* A match result ("val"), also the entry of the prefix tables:
	 * action in bits 29-31, counter slot in bits 0-28; 0 = no match.
	 * In DIR-24-8 tables bit 31 set means "the rest is a tbl8 group":
	 * prefix rules only drop or pass (action 1 or 2), so only a compound
	 * rule's val (fd_conf.crule) has action FD_ACT_LIMIT (bit 31), and
	 * then bits 0-28 are not its counter slot but its police entry
	 * (fd_police); fd_decide resolves it into a val of drop or pass with
	 * the rule's slot, so everything after it sees the old encoding. */
	FD_VAL_ACT_SHIFT = 29,
	FD_VAL_SLOT_MASK = (1 << FD_VAL_ACT_SHIFT) - 1,

	/* Counter slots: per CPU, fd_counter_slots slots of struct counter.
	 * The first FD_SLOT_RULES are not rules: malformed frames and frames
	 * no rule matched, counted by action (base + enum fd_action), and
	 * the counts of removed rules, which user space adds up by action.
	 * A frame is counted once, in one slot whose action is known, so
	 * user space derives the per-verdict counts. */
	FD_SLOT_MALFORMED = 0,                     /* + action */
	FD_SLOT_DEFAULT = FD_SLOT_MALFORMED + 4,   /* + action */
	FD_SLOT_RETIRED = FD_SLOT_DEFAULT + 4,     /* + action; never written by the program */
	/* Frames dropped because their source was banned (fd_bans). */
	FD_SLOT_BANNED = FD_SLOT_RETIRED + 5,
	FD_SLOT_RULES = 16,

	/* Policing (limit rules): fd_police entries (entry 0 is not a rule:
	 * its tat is the test clock, see fd_test_clock), their per-CPU
	 * counters, and the fixed-point units of the buckets: time in
	 * 1/16 ns (2^64 of them is 36 years of uptime), a byte's cost in
	 * 2^-16 of that. */
	FD_POLICE_MAX = 1024,
	FD_POLICE_SIZE = 64,  /* struct fd_police */
	FD_PCNT_SIZE = 40,    /* struct fd_pcnt */
	FD_POL_TIME_SHIFT = 4,
	FD_POL_BYTE_SHIFT = 16,
	FD_BAN_LENS = 4,      /* distinct ban prefix lengths per family */
	/* Distinct IPv6 prefixes with an offset (FD_BM_OFF6), source and
	 * destination together. */
	FD_OFF6_MAX = 16,
	FD_SRC_WAYS = 8,      /* ways of a set of fd_pol_src: two cache lines */

	/* Entries of a direct table indexed by a 16-bit value (ports, ether,
	 * the first 16 bits of an address). */
	FD_DIRECT = 1 << 16,
	/* Entries of the front tables (see fd_front_ports, fd_front_proto). */
	FD_FRONT_PORTS_N = 4 * FD_DIRECT, /* (IPv6, UDP) x dport */
	FD_FRONT_PROTO_N = 4 * 256,       /* (IPv6, non-first fragment) x proto */
	/* rx queues: a rule names queues 0 to FD_QUEUES - 1 (the XSKMAP has
	 * a slot for each); a frame of a higher queue is indexed as
	 * FD_QUEUES, which no queue range holds. */
	FD_QUEUES = 256,

	/* fd_cls_half.tab: u16 class ids, FD_TAB_HALF per half. The direct
	 * tables (FD_DIR_*), then the first 16 bits of each address field,
	 * then a pool of 256-entry chunks for the address tries. A trie entry
	 * with bit 15 set is a chunk index. */
	FD_TAB_SRC4 = FD_DIR_END,
	FD_TAB_DST4 = FD_TAB_SRC4 + FD_DIRECT,
	FD_TAB_SRC6 = FD_TAB_DST4 + FD_DIRECT,
	FD_TAB_DST6 = FD_TAB_SRC6 + FD_DIRECT,
	FD_TAB_POOL = FD_TAB_DST6 + FD_DIRECT,
	FD_TAB_CHUNK = 256, /* entries of a chunk: 8 bits */
	FD_TAB_CHUNKS = 8192,
	/* The front tables' classes (more than 64 compound rules): indexed as
	 * FD_B64_PORTS and FD_B64_FRONT are, their bitmaps at FD_BM_FRONT. */
	FD_TAB_FPORTS = FD_TAB_POOL + FD_TAB_CHUNKS * FD_TAB_CHUNK,
	FD_TAB_FPROTO = FD_TAB_FPORTS + FD_FRONT_PORTS_N,
	/* With at most 64 compound rules, the IPv4 address fields also have
	 * a two-level trie, 20 + 12 bits: the first level of the source
	 * field, then the destination's, then chunks of 4096 entries (a field
	 * needs at most one per prefix longer than /20). */
	FD_TAB_W4 = FD_TAB_FPROTO + FD_FRONT_PROTO_N,
	FD_TAB_W4L1 = 1 << 20,     /* entries of a first level: 20 bits */
	FD_TAB_W4CHUNK = 1 << 12,  /* entries of a chunk: 12 bits */
	FD_TAB_W4POOL = FD_TAB_W4 + 2 * FD_TAB_W4L1,
	FD_TAB_W4CHUNKS = 128,
	FD_TAB_HALF = FD_TAB_W4POOL + FD_TAB_W4CHUNKS * FD_TAB_W4CHUNK,
	FD_TAB_EXT = 0x8000,

	/* fd_cls_half.bm: rule bitmaps, FD_BM_HALF per half, FD_BM_FIELD
	 * classes per field, then FD_BM_FRONTS for the front tables (their
	 * classes never exceed 4 x 513 + 4 x 257). */
	FD_BM_FIELD = 1024,
	FD_BM_FRONT = FD_FLD_MAX * FD_BM_FIELD,
	FD_BM_FRONTS = 4096,
	FD_BM_HALF = FD_BM_FRONT + FD_BM_FRONTS,
	/* The IPv6 prefixes with an offset (FD_FLD_OFF6) take the last of
	 * the front classes' bitmaps, which those never reach: entry i is
	 * bm[FD_BM_OFF6 + 2i], its mask and value as the address is loaded
	 * (w[0], w[1] the mask's halves, w[2], w[3] the value's), and
	 * bm[FD_BM_OFF6 + 2i + 1], the rules whose src (or dst: bit i of
	 * fd_conf.off6_dst) it is. */
	FD_BM_OFF6 = FD_BM_HALF - 2 * FD_OFF6_MAX,

	/* fd_cls_half.b64: with at most 64 compound rules a bitmap is one
	 * u64; then the direct fields map a value straight to its bitmap,
	 * and the address fields' classes have bitmaps here too.
	 * An IP frame's first read is one of two front tables, which hold the
	 * AND of everything fixed by the frame's family, fragment offset,
	 * protocol and destination port: the kind's rules and the ether and
	 * protocol fields' bitmaps, for frames with ports also dport's.
	 * FD_B64_PORTS is indexed by fd_front_ports(), FD_B64_FRONT by
	 * fd_front_proto(). */
	FD_B64_SRC4 = FD_DIR_END, /* after the direct tables (FD_DIR_*) */
	FD_B64_DST4 = FD_B64_SRC4 + FD_BM_FIELD,
	FD_B64_SRC6 = FD_B64_DST4 + FD_BM_FIELD,
	FD_B64_DST6 = FD_B64_SRC6 + FD_BM_FIELD,
	FD_B64_PORTS = FD_B64_DST6 + FD_BM_FIELD,
	FD_B64_FRONT = FD_B64_PORTS + FD_FRONT_PORTS_N,
	FD_B64_HALF = FD_B64_FRONT + FD_FRONT_PROTO_N,

	/* Byte offsets in struct fd_cls_half, and its size. */
	FD_CLS_TAB = 0,
	FD_CLS_BM = FD_CLS_TAB + FD_TAB_HALF * 2,
	FD_CLS_B64 = FD_CLS_BM + FD_BM_HALF * 32,
	FD_CLS_SIZE = FD_CLS_B64 + FD_B64_HALF * 8,

	/* DIR-24-8 sizes: tbl24 entries per half, entries per tbl8 group. */
	FD_V4_TBL24 = 1 << 24,
	FD_V4_GROUP = 256,
	FD_V4_SPARSE_MAX = 11, /* host routes in a sparse group */
	FD_V4_SPARSE_SIZE = 64, /* struct fd_v4_sparse */

	/* fd_conf.features: what of the rule set in force needs more than
	 * the plain path (fd_run): compound rules that use a field beyond
	 * FD_FLD_PLAIN, limit rules, bans to look up, late rules while there
	 * are prefix rules (without, a late rule is judged as any other), and
	 * a capture or rule samples (FD_FEAT_CAPTURE). With none of them a
	 * frame takes the plain path, which has no code for any of them: one
	 * test of features is all they cost a frame that needs none
	 * (measured A/B, docs/BENCHMARKS.md, issues 14, 16 and 20). */
	FD_FEAT_FIELDS = 1 << 0,
	FD_FEAT_LIMIT = 1 << 1,
	FD_FEAT_BANS = 1 << 2,
	FD_FEAT_LATE = 1 << 3,
	/* Set in both halves' features while fd_main.cap_active is not 0,
	 * by user space (fastdrop's SyncCapture, run by whoever changes
	 * either word): the rule set's compiler does not know of captures,
	 * which other processes start and stop. Kept in features, and not
	 * read from cap_active by the plain path, so that the plain path is
	 * the same code as a program without capture support (issue 16). */
	FD_FEAT_CAPTURE = 1 << 4,
	/* Destination prefix rules ("drop dst P"): the destination prefix
	 * table (fd_d4_tbl24, fd_half.dconf) holds some, looked up before
	 * the source prefix table. */
	FD_FEAT_DST = 1 << 5,
	/* The fields the plain path reads: those of the first matcher (see
	 * enum fd_field); any other one a rule uses sets FD_FEAT_FIELDS. */
	FD_FLD_PLAIN = (1 << FD_FLD_ETHER) | (1 << FD_FLD_PROTO) | (1 << FD_FLD_SPORT) |
		       (1 << FD_FLD_DPORT) | (1 << FD_FLD_SRC4) | (1 << FD_FLD_DST4) |
		       (1 << FD_FLD_SRC6) | (1 << FD_FLD_DST6),

	/* Byte offsets in struct fd_main (the value of fd_main): the state,
	 * the stamp, then the halves, each its fd_conf, its compound
	 * tables and its tbl24 (struct fd_half, FD_HALF_SIZE bytes). */
	FD_MAIN_CAP_ACTIVE = 16,
	FD_MAIN_STAMP = 64,
	FD_MAIN_CAP = 1024,
	FD_MAIN_HALF = 4096,
	FD_HALF_DCONF = 2048,
	FD_HALF_CLS = 4096,
	FD_HALF_TBL24 = FD_HALF_CLS + FD_CLS_SIZE,
	FD_HALF_SIZE = FD_HALF_TBL24 + FD_V4_TBL24 * 4,

	/* fd_v6_tab entry flags. */
	FD_V6_USED = 1,
	FD_V6_MARKER = 2,  /* longer prefixes exist below: search on */
	FD_V6_PREFIX = 4,  /* a prefix rule itself, not only a marker */
	FD_V6_PROBES = 16, /* no key sits further from home (Go ensures) */
	FD_V6_DEPTH = 8,   /* binary search over <= 255 lengths */
};

/* Each section of the layout holds what indexes it, and masks are powers
 * of two. The offsets above are sums of the sizes before them; these say
 * why each size is enough. */
#define FD_POW2(x) ((x) > 0 && ((x) & ((x) - 1)) == 0)
_Static_assert(FD_BM_WORDS * 64 == FD_MAX_COMPOUND, "one bitmap bit per compound rule");
_Static_assert(FD_SLOT_RETIRED + 4 <= FD_SLOT_RULES, "the slots by action come before the rules'");
_Static_assert(FD_SLOT_RULES - 1 <= FD_VAL_SLOT_MASK, "a slot fits a val");
_Static_assert(FD_ACT_LIMIT <= 7, "an action fits the three action bits of a val");
_Static_assert(FD_POLICE_MAX - 1 <= FD_VAL_SLOT_MASK, "a police entry fits a val");
_Static_assert(FD_SLOT_BANNED < FD_SLOT_RULES && FD_SLOT_BANNED != FD_SLOT_RETIRED + FD_ACT_LIMIT, "the banned slot");
/* fd_cls_half.tab */
#define FD_X_FITS(NAME, MEMBER, BITS, WHEN)                                                  \
	_Static_assert(FD_DIR_##NAME##_END - FD_DIR_##NAME + 1 == 1 << (BITS), #NAME ": one entry per value"); \
	_Static_assert(sizeof(((struct fd_pkt *)0)->MEMBER) * 8 >= (BITS), #NAME ": fd_pkt holds its bits");
_Static_assert((int)FD_TAB_SRC4 >= (int)FD_DIR_END, "the direct tables come first");
_Static_assert(FD_POW2(FD_TAB_CHUNKS) && FD_TAB_CHUNKS <= FD_TAB_EXT, "trie chunks: masked, and a u16 entry names one");
_Static_assert(FD_TAB_FPROTO - FD_TAB_FPORTS >= FD_FRONT_PORTS_N, "front classes with ports");
_Static_assert(FD_TAB_W4 - FD_TAB_FPROTO >= FD_FRONT_PROTO_N, "front classes without ports");
_Static_assert(FD_POW2(FD_FRONT_PORTS_N) && FD_POW2(FD_FRONT_PROTO_N), "front indexes are masked");
_Static_assert(FD_FRONT_PORTS_N > (1 << 17 | 1 << 16 | 0xffff), "fd_front_ports: IPv6 << 17 | UDP << 16 | dport");
_Static_assert(FD_FRONT_PROTO_N > (1 << 9 | 1 << 8 | 0xff), "fd_front_proto: IPv6 << 9 | non-first << 8 | proto");
_Static_assert(FD_TAB_CHUNK == 1 << 8, "trie chunks resolve 8 bits (fd_trie4, fd_trie6)");
_Static_assert(FD_TAB_W4L1 == 1 << 20 && FD_TAB_W4CHUNK == 1 << 12, "W4 tries: 20 + 12 bits (fd_trie4w)");
_Static_assert(FD_TAB_W4POOL - FD_TAB_W4 >= 2 * FD_TAB_W4L1, "two first levels (source, destination)");
_Static_assert(FD_POW2(FD_TAB_W4CHUNKS) && FD_TAB_W4CHUNKS <= FD_TAB_EXT, "W4 chunks: masked, and a u16 entry names one");
_Static_assert(FD_TAB_HALF - FD_TAB_W4POOL >= FD_TAB_W4CHUNKS * FD_TAB_W4CHUNK, "W4 chunks");
_Static_assert(FD_QUEUES < 1 << 9, "queue: 9 bits hold the queues and FD_QUEUES");
/* fd_cls_half.bm */
_Static_assert(FD_POW2(FD_BM_FIELD) && FD_BM_FIELD <= FD_TAB_EXT, "field classes: masked, below the chunk bit");
_Static_assert(FD_BM_FRONT >= FD_FLD_MAX * FD_BM_FIELD, "the fields' bitmaps");
_Static_assert(FD_POW2(FD_BM_FRONTS) && FD_BM_FRONTS >= 4 * 513 + 4 * 257, "the front classes' bitmaps");
_Static_assert(FD_BM_HALF >= FD_BM_FRONT + FD_BM_FRONTS, "bitmaps of a half");
_Static_assert(FD_BM_OFF6 >= FD_BM_FRONT + 4 * 513 + 4 * 257, "the offset prefixes after the front classes");
/* fd_cls_half.b64 */
_Static_assert((int)FD_B64_SRC4 >= (int)FD_DIR_END, "b64: the direct tables come first");
_Static_assert(FD_B64_PORTS - FD_B64_DST6 >= FD_BM_FIELD, "b64 address classes");
_Static_assert(FD_B64_FRONT - FD_B64_PORTS >= FD_FRONT_PORTS_N, "b64 front with ports");
_Static_assert(FD_B64_HALF - FD_B64_FRONT >= FD_FRONT_PROTO_N, "b64 front without ports");
/* struct fd_cls_half, struct fd_half: sizes fit an enum and a map value. */
_Static_assert(FD_HALF_SIZE < 0x7fffffff / 2 - FD_MAIN_HALF, "fd_main fits an array map value");

/* A tbl24 entry with FD_V4_EXT points to a group: with FD_V4_SPARSE a
 * sparse group, else a tbl8 group; its number in FD_V4_ID. */
#define FD_V4_EXT 0x80000000u
#define FD_V4_SPARSE 0x40000000u
#define FD_V4_ID 0x3fffffffu

/* The host routes (/32s) of a /24 that holds no other prefix longer than
 * /24: by last byte, key[i] -> val[i] for i < n, and def (the /24's own
 * val) for every other address. 64 bytes instead of a 1 KiB tbl8 group. */
struct fd_v4_sparse {
	__u32 def;
	__u32 n;
	__u8 key[FD_V4_SPARSE_MAX];
	__u8 pad;
	__u32 val[FD_V4_SPARSE_MAX];
};

_Static_assert(sizeof(struct fd_v4_sparse) == FD_V4_SPARSE_SIZE, "fd_v4_sparse size");

/* Written by user space; packets read it once. */
struct fd_state {
	__u32 active;     /* half in use: 0 or 1 */
	__u32 in_sync;    /* 1 when both halves hold the same tables */
	__u64 generation; /* incremented by every flip */
};

/* Written once by the user space that creates the maps, checked by every
 * later one that opens their pins; the program never reads it. */
struct fd_stamp {
	__u32 layout_version; /* FD_LAYOUT_VERSION */
	__u32 rec_size;       /* FD_REC_SIZE */
	__u32 conf_size;      /* sizeof(struct fd_conf) */
	__u32 half_size;      /* FD_HALF_SIZE */
};

struct fd_bm {
	__u64 w[FD_BM_WORDS];
};

/* Per-half configuration: everything about a rule set that is not a big
 * table. */
struct fd_conf {
	enum fd_action policy;    /* when nothing matches */
	enum fd_action malformed; /* for malformed frames */
	__u32 fields;    /* 1 << enum fd_field for each field compound rules use */
	__u32 ncompound;
	__u32 v4_count;      /* IPv4 prefix rules; 0 skips the lookup */
	__u32 v6_count;      /* IPv6 prefix rules; 0 skips the lookup */
	__u32 v6_mask;       /* entries in use - 1 (a power of two - 1) */
	__u32 v6_shift;      /* 64 - log2(entries in use) */
	__u32 v6_default;    /* val of a ::/0 prefix rule, 0 if none */
	__u32 half;          /* which half this is: the key of its tables */
	__u32 features;      /* FD_FEAT_*: 0 lets a frame take the plain path */
	__u64 v6_seed;
	/* Binary search tree over the distinct IPv6 prefix lengths: node n
	 * has children 2n and 2n+1, 0 = no node; node 0 is unused. */
	__u8 v6_tree[256];
	/* Rules that a frame of this kind can match at all (family, non-first
	 * fragment, ports present), by fd_pkt.kind; the front tables
	 * (FD_B64_PORTS) hold them ANDed with the other fields' bitmaps. */
	struct fd_bm kind[FD_KINDS];
	/* val of compound rule i. */
	__u32 crule[FD_MAX_COMPOUND];
	/* With at most 64 compound rules, the same by fd_ctz_hash of the
	 * rule's bit: a match's val is one read after its bitmap. */
	__u32 crule_h[64];
	/* Compound rules from this position on are late: a frame they match
	 * is looked up in the prefix rules first, and a prefix rule that
	 * matches wins (the redirect command's rules come after every rule
	 * of the drop command, its prefix rules too). ncompound when none. */
	__u32 late_from;
	/* Bans are looked up before the rules when the frame's family has
	 * any: the prefix lengths bans are keyed by, one per byte (lowest
	 * first, 0 ends the list). User space lists those of its limit
	 * rules and of the bans that outlive them. */
	__u32 ban4;
	__u32 ban6;
	/* The destination prefix table (FD_FEAT_DST): its IPv4 and IPv6
	 * prefix rules (0 skips a family's lookup; the IPv6 table's own
	 * parameters are fd_half.dconf's). After every member the plain path
	 * reads, so that none of theirs moves. */
	__u32 d4_count;
	__u32 d6_count;
	/* IPv6 prefixes with an offset (FD_FLD_OFF6, FD_BM_OFF6): noff6 of
	 * them; bit i of off6_dst: entry i is a destination's. */
	__u32 noff6;
	__u32 off6_dst;
};

/* One half of the compound-rule tables. */
struct fd_cls_half {
	__u16 tab[FD_TAB_HALF];
	struct fd_bm bm[FD_BM_HALF];
	__u64 b64[FD_B64_HALF];
};

_Static_assert(__builtin_offsetof(struct fd_cls_half, tab) == FD_CLS_TAB, "fd_cls_half layout");
_Static_assert(__builtin_offsetof(struct fd_cls_half, bm) == FD_CLS_BM, "fd_cls_half layout");
_Static_assert(__builtin_offsetof(struct fd_cls_half, b64) == FD_CLS_B64, "fd_cls_half layout");
_Static_assert(sizeof(struct fd_cls_half) == FD_CLS_SIZE, "fd_cls_half layout");

/* One entry of the IPv6 prefix hash table (binary search on prefix
 * lengths with markers, Waldvogel et al. 1997). */
struct fd_v6_ent {
	__u64 hi, lo; /* address masked to len, as loaded from the packet */
	__u32 val;    /* best matching prefix rule here (for a marker: the
		       * longest prefix rule containing it), 0 if none */
	__u8 len;
	__u8 flags; /* FD_V6_* */
	__u8 dist;  /* slots from its home slot (Robin Hood hashing) */
	__u8 pad;
	__u64 pad2;
};

/* A rule as stored for recovery by a later process (fd_rules[slot]). The
 * program reads only its sample member (fd_cap_sample). A rule is in the rule set of generation G (see
 * fd_state) if gen_added <= G and (gen_removed == 0 or G < gen_removed),
 * compared as serial numbers: a change writes the records of the rules it
 * adds and removes before it flips, and a later process that finds the
 * flip never happened still sees the old set. */
struct fd_rule_rec {
	__u8 action;  /* enum fd_action; 0 = free slot */
	__u8 family;  /* 4 or 6 when src or dst is set */
	__u8 src_len;
	__u8 dst_len;
	__u32 flags;  /* FD_REC_*: the match fields the rule sets */
	__u32 line;
	__u32 order; /* sorts the rules into rule-set order */
	__u32 gen_added;
	__u32 gen_removed;
	__u8 src[16];
	__u8 dst[16];
	/* The values of the other match fields (fastdrop/fields.go's
	 * matchFields say which members each uses). */
	__u16 ether;
	__u16 sport_lo;
	__u16 sport_hi;
	__u16 dport_lo;
	__u16 dport_hi;
	__u8 proto;
	__u8 ttl_lo;
	__u8 ttl_hi;
	__u8 tcp_set;   /* flags: bits that must be set */
	__u8 tcp_clear; /* flags: bits that must be clear */
	__u8 tcp_exact; /* flags: 1 for ==, the byte is exactly tcp_set */
	__u16 queue_lo;
	__u16 queue_hi;
	/* The match fields' bytes (FlowSpec's, issue 20): dscp here,
	 * ICMP type and code after the limit parameters. */
	__u8 dscp_lo;
	__u8 dscp_hi;
	__u8 dscp_named; /* 1: written by name (ef, af11, cs1, ...) */
	__u8 type_named; /* 1: type written by name (echo-request, ...) */
	/* Where the rule came from (fastdrop.Rule.Origin): a name of at most
	 * FD_ORIGIN_LEN bytes, NUL-padded; all NUL for the default origin. */
	char origin[FD_ORIGIN_LEN];
	/* Limit rules (action FD_ACT_LIMIT); the police entry's epoch is
	 * gen_added. */
	__u64 lim_rate;   /* per second: packets, bits or bytes (lim_flags) */
	__u32 lim_burst;  /* packets or bytes; 0 = the default */
	__u32 lim_ban_ms; /* 0 = no ban */
	__u16 lim_police; /* its fd_police entry */
	__u8 lim_flags;   /* FD_LIM_* */
	__u8 lim_len4;    /* per src/N: the IPv4 prefix length */
	__u8 lim_len6;
	__u8 lim_pad[3];
	/* The rule's sample modifier: 1 in sample of its frames go to
	 * fd_cap_samples (capture.h); 0: none. The one member the program
	 * reads but for limit rules', and only while cap_active has
	 * FD_CAP_RULES. */
	__u32 sample;
	__u8 type_lo; /* ICMP / ICMPv6 type */
	__u8 type_hi;
	__u8 code_lo;
	__u8 code_hi;
	/* From byte 128 (record of 160 bytes, layout 9): issue 20's further
	 * FlowSpec fields. len (fastdrop.LenRange): len_lo-len_hi, or with
	 * len_op a comparison with the value written (in len_lo for > and
	 * >=, len_hi for < and <=). */
	__u16 len_lo;
	__u16 len_hi;
	__u8 len_op; /* enum fd_cmp */
	/* frag with bits (frag first, frag !df, ...): PARSE_FRAG_* bits that
	 * must be set and that must be clear. */
	__u8 frag_set;
	__u8 frag_clear;
	__u8 rsv0;
	__u16 port_lo; /* port: source or destination port in lo-hi */
	__u16 port_hi;
	/* How ttl, dscp, type and code were written (enum fd_cmp): a
	 * comparison (ttl <3) keeps its range in *_lo-*_hi. */
	__u8 ttl_op;
	__u8 dscp_op;
	__u8 type_op;
	__u8 code_op;
	/* IPv6 prefix offsets (FlowSpec types 1 and 2, RFC 8956 3.1): src
	 * and dst then match bits *_off to *_len - 1 only; 0 for a prefix
	 * from bit 0. */
	__u8 src_off;
	__u8 dst_off;
	/* Room for the next fields; a field taken from here raises
	 * FD_LAYOUT_VERSION. */
	__u8 rsv[14];
};

_Static_assert(sizeof(struct fd_rule_rec) == FD_REC_SIZE, "fd_rule_rec size");

/* fd_rule_rec.lim_flags and fd_police.flags. */
enum fd_lim_flags {
	FD_LIM_BYTES = 1,  /* the rate is of bytes (else packets) */
	FD_LIM_BITS = 2,   /* written in bits (the record only) */
	FD_LIM_PERSRC = 4, /* a bucket per source prefix */
};

/* A limit rule's policer, by the number in its val (fd_conf.crule).
 * A generic cell rate algorithm (GCRA): the token bucket as a single
 * time, tat, at which the bucket would be full again; a frame that costs
 * c conforms if max(tat, now) + c <= now + burst, and then moves tat by
 * c. A bucket is one word that every CPU updates with atomics (shared,
 * so the limit holds for the aggregate whatever CPU its frames come to);
 * frames that exceed only read it. User space writes an entry before any
 * val names it and never while one does, but for tat (a new bucket). */
struct fd_police {
	__u64 tat;    /* the aggregate bucket (1/16 ns) */
	__u64 cost;   /* of a packet (1/16 ns), or a byte's << 16 with FD_LIM_BYTES */
	__u64 burst;  /* the bucket's depth (1/16 ns) */
	__u64 ban_ns; /* 0 = no ban */
	__u32 slot;   /* the rule's counter slot */
	__u32 epoch;  /* keys its per-source buckets (new for each rule) */
	__u8 flags;   /* FD_LIM_* */
	__u8 len4;    /* per src/N */
	__u8 len6;
	__u8 pad[5];
	/* Entry 0 only: the end of the latest ban made (fd_pol_now's
	 * clock). Before it, bans may be live and frames are looked up in
	 * fd_bans; after it none is, and the lookup is skipped. Only ever
	 * raised (by the program, or by user space copying bans into new
	 * maps), never lowered: a stale value costs lookups, not bans. */
	__u64 ban_end;
	__u64 pad2;
};

_Static_assert(sizeof(struct fd_police) == FD_POLICE_SIZE, "fd_police size");

/* Per CPU and police entry: what exceeded (what conformed is the rest of
 * the rule's counter slot), bans made, per-source buckets made. Entry 0
 * holds what rules since removed counted (user space adds them up). */
struct fd_pcnt {
	__u64 exceed_packets;
	__u64 exceed_bytes;
	__u64 bans;
	__u64 sources;
	/* per-source buckets this rule's new sources took from other
	 * sources (fd_pol_src: the set was full) */
	__u64 evicted;
};

_Static_assert(sizeof(struct fd_pcnt) == FD_PCNT_SIZE, "fd_pcnt size");

/* Key of a per-source bucket (fd_pol_src) and of a ban (fd_bans): the
 * source masked to the rule's length (IPv4 in host order in hi, IPv6 as
 * in the packet). */
struct fd_src_key {
	__u32 id;    /* buckets: police entry | family << 16; bans: family << 8 | length */
	__u32 epoch; /* buckets: fd_police.epoch; bans: 0 */
	__u64 hi;
	__u64 lo;
};

struct fd_ban {
	__u64 until;   /* bpf_ktime_get_ns() (CLOCK_MONOTONIC) at which it ends */
	__u64 since;   /* when it was made */
	__u64 dropped; /* frames dropped by it */
	/* until on fd_pol_now's clock: what the program compares (user space
	 * reads until and since, on CLOCK_MONOTONIC). */
	__u64 end;
	__u32 slot;    /* the counter slot of the rule that made it */
	__u32 epoch;   /* that rule's fd_police.epoch */
};

enum fd_rec_flags {
	FD_REC_SRC = 1,
	FD_REC_DST = 2,
	FD_REC_PROTO = 4,
	FD_REC_SPORT = 8,
	FD_REC_DPORT = 16,
	FD_REC_FRAG = 32,
	FD_REC_TTL = 64,
	FD_REC_FLAGS = 128,
	FD_REC_QUEUE = 256,
	FD_REC_DSCP = 512,
	FD_REC_TYPE = 1024,
	FD_REC_CODE = 2048,
	FD_REC_LEN = 4096,
	FD_REC_FRAGBITS = 8192,
	FD_REC_PORT = 16384,
	/* The rule has a numeric field that its record's members cannot
	 * hold (a value list, a negated list, a comparison on a field with
	 * no *_op member, a value past the member's width): those fields
	 * are in fd_rule_lists under the rule's slot. */
	FD_REC_LISTS = 32768,
	FD_REC_FLOWLABEL = 65536, /* flowlabel: always in fd_rule_lists */
	/* The rule was written otherwise than its canonical form: its text
	 * as written is in fd_rule_text under the rule's slot. */
	FD_REC_TEXT = 131072,
};

/* fd_rule_rec.len_op: how a numeric field's range was written. */
enum fd_cmp {
	FD_CMP_NONE = 0,  /* no such field */
	FD_CMP_RANGE = 1, /* N or LO-HI */
	FD_CMP_GT = 2,    /* >N: no upper bound (IPv6 lengths pass 65535) */
	FD_CMP_GE = 3,    /* >=N */
	FD_CMP_LT = 4,    /* <N */
	FD_CMP_LE = 5,    /* <=N */
};

/* What xdp_fastdrop_trace prepends to the frame in a test run. */
struct fd_trace_rec {
	__u8 magic; /* 0xfd */
	__u8 verdict; /* XDP action */
	__u8 class;   /* enum fd_class */
	__u8 index;   /* compound rule position when class is compound */
	__u32 val;
};

/* The fields rules match on. */
struct fd_pkt {
	__u64 src6[2]; /* IPv6 addresses as in the packet (network byte order) */
	__u64 dst6[2];
	__u32 src4; /* IPv4 addresses in host order */
	__u32 dst4;
	/* len (FlowSpec type 10): the IP packet's length without layer 2,
	 * with the IP header: IPv4 total length, IPv6 40 + payload length
	 * (up to 65575: 17 bits); 0 for frames that are not IP. */
	__u32 pktlen;
	/* The IPv6 flow label (FlowSpec type 13, 20 bits); 0 for other
	 * frames, which no flowlabel rule's kind takes. */
	__u32 flowlabel;
	__u16 ethertype; /* after the VLAN tags, host order */
	__u16 sport;     /* host order, when has_ports */
	__u16 dport;
	__u8 family; /* 0 (not IP), 4 or 6 */
	__u8 proto;
	__u8 ttl;      /* IPv4 TTL, IPv6 hop limit */
	__u8 tcpflags; /* TCP header byte 13 (CWR ... FIN), when has_ports; 0 for UDP */
	__u8 dscp;     /* the top 6 bits of the IPv4 TOS / IPv6 traffic class */
	__u8 icmp_type; /* ICMP or ICMPv6 (first fragments), else 0 */
	__u8 icmp_code;
	__u8 nonfirst; /* a fragment with offset != 0 */
	__u8 fragbits; /* PARSE_FRAG_* (parsing.h) */
	__u8 has_ports;
	__u8 kind; /* family (0, 4 or 8) | nonfirst << 1 | has_ports */
	__u16 queue; /* rx queue, FD_QUEUES for the queues above */
};

FD_DIRECT_FIELDS(FD_X_FITS)
#undef FD_X_FITS

struct fd_result {
	__u32 val; /* action and counter slot */
	__u32 class;
	__u32 index;
};

#include "capture.h"

/* ---- maps ---- */

/* One half of the rule set: everything of a fixed size that packets read
 * besides the state, at constant offsets from one pointer: the
 * configuration, the compound-rule tables and the DIR-24-8 tbl24 (as
 * DPDK's rte_lpm: the top 24 bits of an address index tbl24; an entry is
 * a val, or with bit 31 a tbl8 group of 256 entries for the last 8 bits).
 * A packet keeps one register for its half instead of the value, the half
 * number and the configuration. */
struct fd_half {
	struct fd_conf conf;
	__u8 pad[FD_HALF_DCONF - sizeof(struct fd_conf)];
	/* The destination prefix table's IPv6 half, as fd_v6_lookup reads a
	 * configuration: only v6_count, v6_mask, v6_shift, v6_default,
	 * v6_seed, v6_tree and half (its fd_v6_tab entry: 2 + this half's)
	 * are set. One verified function for both tables: a second copy of
	 * its search made the program too big to verify. */
	struct fd_conf dconf;
	__u8 pad2[FD_HALF_CLS - FD_HALF_DCONF - sizeof(struct fd_conf)];
	struct fd_cls_half cls;
	__u32 tbl24[FD_V4_TBL24];
};

/* The value of fd_main: a packet pays one map lookup and then only
 * indexes; the verifier bounds every index by the value size. User space
 * writes it through mmap: the inactive half, then state.active. */
struct fd_main {
	struct fd_state state;
	/* Bit i: capture slot i is in use (capture.h). Non-zero makes the
	 * full path offer each frame to fd_cap_sample (FD_FEAT_CAPTURE puts
	 * every frame on it meanwhile); beside state.active, in the cache
	 * line every frame reads anyway. */
	__u32 cap_active;
	__u8 pad0[FD_MAIN_STAMP - FD_MAIN_CAP_ACTIVE - 4];
	struct fd_stamp stamp;
	__u8 pad1[FD_MAIN_CAP - FD_MAIN_STAMP - sizeof(struct fd_stamp)];
	struct fd_cap_ctl cap;
	__u8 pad[FD_MAIN_HALF - FD_MAIN_CAP - sizeof(struct fd_cap_ctl)];
	struct fd_half half[2];
};

_Static_assert(sizeof(struct fd_state) <= FD_MAIN_STAMP, "fd_main layout");
_Static_assert(__builtin_offsetof(struct fd_main, stamp) == FD_MAIN_STAMP, "fd_main layout");
_Static_assert(__builtin_offsetof(struct fd_main, cap_active) == FD_MAIN_CAP_ACTIVE, "fd_main layout");
_Static_assert(__builtin_offsetof(struct fd_main, cap) == FD_MAIN_CAP, "fd_main layout");
_Static_assert(sizeof(struct fd_conf) <= FD_HALF_DCONF, "fd_half layout");
_Static_assert(__builtin_offsetof(struct fd_half, dconf) == FD_HALF_DCONF, "fd_half layout");
_Static_assert(sizeof(struct fd_v6_ent) == FD_V6_ENT_SIZE, "fd_v6_ent size");
_Static_assert(sizeof(struct counter) == FD_COUNTER_SIZE, "counter size");
_Static_assert(__builtin_offsetof(struct fd_main, half) == FD_MAIN_HALF, "fd_main layout");
_Static_assert(__builtin_offsetof(struct fd_half, cls) == FD_HALF_CLS, "fd_half layout");
_Static_assert(__builtin_offsetof(struct fd_half, tbl24) == FD_HALF_TBL24, "fd_half layout");
_Static_assert(sizeof(struct fd_half) == FD_HALF_SIZE, "fd_half layout");

/* No BTF type for the value: bpf2go would make a 157 MiB Go type of it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(key_size, 4);
	__uint(value_size, sizeof(struct fd_main));
	__uint(max_entries, 1);
} fd_main SEC(".maps");

/* The tbl8 groups and the sparse groups, each pool shared by the halves;
 * their numbers are set from Go at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(key_size, 4);
	__uint(value_size, FD_V4_GROUP * 4);
	__uint(max_entries, 2 * 1024);
} fd_v4_tbl8 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct fd_v4_sparse);
	__uint(max_entries, 2 * 1024);
} fd_v4_sparse SEC(".maps");

/* The IPv6 hash table, fd_v6_cap entries per half (value size set from
 * Go at load); entries 2 and 3 (with room for destination prefixes, else
 * absent) are the destination prefix table's halves. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(key_size, 4);
	__uint(value_size, 1024 * FD_V6_ENT_SIZE);
	__uint(max_entries, 2);
} fd_v6_tab SEC(".maps");

volatile const __u32 fd_v6_cap = 1024;

/* The destination prefix table ("drop dst P" rules), built as the source
 * one: for IPv4 a tbl24 per half (key: the half) and tbl8 and sparse
 * pools of its own, maps sized at load: a program loaded without room
 * for destination prefixes has a tbl24 of one entry (fd_d4_mask 0), so
 * the 128 MiB only exist where such rules are wanted. For IPv6 a hash
 * table per half in fd_v6_tab (entries 2 and 3), searched by fd_v6_lookup
 * with fd_half.dconf. The program reads them only with FD_FEAT_DST. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(key_size, 4);
	__uint(value_size, 4);
	__uint(max_entries, 2);
} fd_d4_tbl24 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(key_size, 4);
	__uint(value_size, FD_V4_GROUP * 4);
	__uint(max_entries, 2);
} fd_d4_tbl8 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct fd_v4_sparse);
	__uint(max_entries, 2);
} fd_d4_sparse SEC(".maps");

/* tbl24 entries of fd_d4_tbl24's values - 1: FD_V4_TBL24 - 1, or 0 when
 * loaded without the table (set from Go at load); it bounds the lookup's
 * index for the verifier. */
volatile const __u32 fd_d4_mask = 0;

/* Counters: one value per possible CPU (the key), fd_counter_slots
 * struct counter each (sizes set from Go at load). Each CPU only writes
 * its own slots, and an XDP program is not preempted on its CPU, so no
 * atomics are needed; user space sums the CPUs. (A per-CPU array would
 * need one allocation per slot and a syscall to read; this is read
 * through one mmap.) Keyed by CPU, not by CPU and slot, the row is found
 * without waiting for the frame's verdict: only indexing it does. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(key_size, 4);
	__uint(value_size, 1024 * 16);
	__uint(max_entries, 2);
} fd_counters SEC(".maps");

/* Rules by counter slot, so a later process can list and change them. The
 * program never reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct fd_rule_rec);
	__uint(max_entries, 1024);
} fd_rules SEC(".maps");

/* The numeric fields of the rules whose records cannot hold them
 * (FD_REC_LISTS), by the rules' slots: value lists, negated lists (issue
 * 20), encoded by fastdrop/fields_num.go. Only compound rules have them, so
 * few slots have an entry (allocated when written). The program never
 * reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__uint(value_size, FD_LISTS_SIZE);
	__uint(max_entries, FD_LISTS_MAX);
} fd_rule_lists SEC(".maps");

/* The text of the compound rules written otherwise than their canonical
 * form (FD_REC_TEXT), by the rules' slots: a u16 length, then the text
 * (fastdrop.Rule.Text), so that a later process lists a rule as its file
 * has it. The program never reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__uint(value_size, FD_TEXT_SIZE);
	__uint(max_entries, FD_LISTS_MAX);
} fd_rule_text SEC(".maps");

/* Counter slots per CPU (in each value of fd_counters). */
volatile const __u32 fd_counter_slots = 1024;

/* AF_XDP sockets by rx queue: a frame whose action is redirect goes to
 * the socket of its queue, or to the stack when the slot is empty. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, FD_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} fd_xsks SEC(".maps");

/* What became of the frames a redirect rule (or policy) chose, by rx
 * queue: key queue * FD_XSK_VERDICTS + enum fd_xsk_verdict; the queues
 * from FD_QUEUES up share the slots of FD_QUEUES. Only those frames pay
 * for it. */
enum fd_xsk_verdict {
	FD_XSK_REDIRECTED = 0, /* handed to the queue's socket */
	FD_XSK_NO_SOCKET = 1,  /* no socket on the queue: to the stack */
	FD_XSK_VERDICTS = 2,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, (FD_QUEUES + 1) * FD_XSK_VERDICTS);
	__type(key, __u32);
	__type(value, struct counter);
} fd_xsk_counters SEC(".maps");
/* The policers of limit rules, by the number in their vals. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct fd_police);
	__uint(max_entries, FD_POLICE_MAX);
} fd_policers SEC(".maps");

/* Their counters: one value per possible CPU (set from Go at load), each
 * FD_POLICE_MAX struct fd_pcnt, as fd_counters. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(key_size, 4);
	__uint(value_size, FD_POLICE_MAX * FD_PCNT_SIZE);
	__uint(max_entries, 2);
} fd_pol_cnt SEC(".maps");

/* Per-source buckets of limit rules with per src: a fixed number (set
 * from Go at load), so a flood of spoofed sources cannot grow it. A
 * set-associative cache, not a hash map: a source's bucket is in one set
 * of FD_SRC_WAYS (by a multiplicative hash of its key), and a new source
 * takes the way whose bucket would be full soonest (least tat; of those
 * already full, the first): one that is full already (tat <= now) holds
 * nothing a fresh bucket would not, so only sources still over their
 * rate lose state to a flood. Looking a source up is an array index and
 * compares: an LRU hash lookup (jhash, the bucket's list) cost a frame
 * about 40 ns here.
 *
 * A way is 16 bytes and a set two 64-byte lines (the map is mmapable, so
 * its values start on a page and every set on 128 bytes). A new source
 * takes a full way of the first line before one of the second, and a
 * lookup stops at its way: with the table a quarter full (65,536 random
 * sources in the default 262,144 buckets) about 96% of sources are in
 * their set's first line and cost a frame one line, and about 0.1% are
 * in a set of more than 8 (sources evicting each other, every frame a
 * fresh bucket that passes), where the 131,072 32-byte buckets in sets
 * of 4 that were here before cost two lines and put about 14% of such
 * sources in sets of more than 4. (Consecutive addresses spread evenly
 * over the sets with this hash: the live benchmark's 65,536 put 2 in
 * each, in both layouts.) The
 * way holds the key's hash, not the key: the hash is a bijection of the
 * key's fold (hi ^ lo * odd ^ epoch << 32 | id), which for IPv4 is the
 * key itself (an epoch is one rule's), so two IPv4 sources never share a
 * bucket; two IPv6 sources share one only if their 128-bit folds meet
 * (about 2^-64 a pair). */
struct fd_src_ent {
	__u64 tag; /* fd_src_tag of the source's key; 0 = empty */
	__u64 tat;
};

struct fd_src_set {
	struct fd_src_ent way[FD_SRC_WAYS];
};

_Static_assert(sizeof(struct fd_src_ent) == 16, "fd_src_ent size");
_Static_assert(sizeof(struct fd_src_set) == FD_SRC_WAYS * 16, "fd_src_set size");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	/* For the alignment: the values start on a page. */
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct fd_src_set);
	__uint(max_entries, 16384);
} fd_pol_src SEC(".maps");

/* Bans: checked before the rules, ended by their time (or by user space,
 * xdpdrop unban); kept across rule changes. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct fd_src_key);
	__type(value, struct fd_ban);
	__uint(max_entries, 16384);
} fd_bans SEC(".maps");

/* Test runs (set from Go at load): the clock is fd_policers[0].tat, in ns,
 * so that tests say what time it is; with 2, the policers see it in steps
 * of fd_tick_ns, as they see jiffies. Off, the verifier removes the test. */
volatile const __u32 fd_test_clock = 0;

/* The length of a jiffy in ns (set from Go at load: the resolution of
 * CLOCK_MONOTONIC_COARSE, 1e9/HZ): the policers' clock is jiffies times
 * it (see fd_pol_now). 0: bpf_ktime_get_ns. */
volatile const __u64 fd_tick_ns = 0;

/* fd_pol_src's max_entries - 1 (a power of two; set from Go at load). */
volatile const __u32 fd_src_sets_mask = 0;

/* Never read: it makes the types user space needs (and nothing above
 * references) part of the BTF, so bpf2go exports them to Go. */
volatile const struct {
	enum fd_class class;
	enum fd_field field;
	enum fd_direct direct;
	enum fd_layout layout;
	enum fd_rec_flags rec_flags;
	enum fd_xsk_verdict xsk_verdict;
	struct fd_trace_rec trace;
	struct fd_v6_ent v6;
	struct fd_state state;
	struct fd_stamp stamp;
	struct fd_conf conf;
	struct counter counter;
	enum fd_lim_flags lim_flags;
	struct fd_pcnt pcnt;
	struct fd_ban ban;
	enum fd_cap_layout cap_layout;
	struct fd_cap_ctl cap;
	struct fd_cap_cnt cap_cnt;
	struct fd_cap_rec cap_rec;
} fd_btf_anchor = {};

/* ---- compound rules: bit-vector classifier ---- */

/* fd_opaque hides what clang knows of x: a trie entry read as 16 bits
 * whose top bit is tested would be sign-extended with two shifts and
 * compared (three instructions), where one JSET does (measured A/B on the
 * worst frame, 64 rules + 10k prefixes: 2.41x -> 2.33x bare). */
#define fd_opaque(x) asm volatile("" : "+r"(x))

/* Multibit trie over an IPv4 address (host order) in a half's class table:
 * 16 + 8 + 8 bits. Chunk indexes are masked to the pool's size, which Go
 * never exceeds, so the verifier sees every read inside the table. */
static __always_inline __u16 fd_trie4(const struct fd_cls_half *t, __u32 tab, __u32 a)
{
	__u32 e = t->tab[tab + (a >> 16)];

	fd_opaque(e);
	if (e & FD_TAB_EXT) {
		e = t->tab[FD_TAB_POOL + ((e & (FD_TAB_CHUNKS - 1)) << 8) + ((a >> 8) & 0xff)];
		fd_opaque(e);
		if (e & FD_TAB_EXT)
			e = t->tab[FD_TAB_POOL + ((__u32)(e & (FD_TAB_CHUNKS - 1)) << 8) + (a & 0xff)];
	}
	return e & 0x7fff;
}

/* Multibit trie over an IPv6 address (hi, lo as loaded from the packet):
 * 16 bits, then 8 per level. A global function: the verifier checks its
 * loop once instead of once per path into it. */
__noinline __u32 fd_trie6(const struct fd_cls_half *t, int dst, __u64 hi, __u64 lo)
{
	__u32 tab = dst ? FD_TAB_DST6 : FD_TAB_SRC6;
	__u32 e;
	int i;

	if (!t)
		return 0;
	e = t->tab[tab + ((__u32)(hi & 0xff) << 8 | (__u32)((hi >> 8) & 0xff))];
	for (i = 2; i < 16; i++) {
		__u64 w = i < 8 ? hi : lo;
		__u32 b = (w >> ((i & 7) * 8)) & 0xff;

		if (!(e & FD_TAB_EXT))
			break;
		e = t->tab[FD_TAB_POOL + ((e & (FD_TAB_CHUNKS - 1)) << 8) + b];
	}
	return e & 0x7fff;
}

/* De Bruijn table of fd_ctz64: the position of the lowest set bit b by
 * the top 6 bits of (1 << b) * 0x03f79d71b4ca8b09. */
static const __u8 fd_ctz_tab[64] = {
	0,  1,  56, 2,  57, 49, 28, 3,  61, 58, 42, 50, 38, 29, 17, 4,
	62, 47, 59, 36, 45, 43, 51, 22, 53, 39, 33, 30, 24, 18, 12, 5,
	63, 55, 48, 27, 60, 41, 37, 16, 46, 35, 44, 21, 52, 32, 23, 11,
	54, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19, 9,  13, 8,  7,  6,
};

/* A different number in 0-63 for each position of the lowest set bit of
 * a non-zero x (fastdrop/compile.go's ctzHash computes the same). */
static __always_inline __u32 fd_ctz_hash(__u64 x)
{
	return ((x & -x) * 0x03f79d71b4ca8b09ULL) >> 58;
}

/* Index of the lowest set bit of a non-zero x: a multiplication and a
 * read. BPF has no count-trailing-zeros instruction, and clang made the
 * binary search branchless, some 50 instructions (a frame that a rule
 * matches, 64 rules + 10k prefixes: 2.95x -> 2.50x bare, A/B). */
static __always_inline __u32 fd_ctz64(__u64 x)
{
	return fd_ctz_tab[fd_ctz_hash(x)];
}

/* acc &= bitmap of class cls of field fld; returns whether any bit is
 * left. */
static __always_inline int fd_bm_and(struct fd_bm *acc, const struct fd_cls_half *t,
				     __u32 fld, __u32 cls)
{
	const struct fd_bm *b = &t->bm[fld * FD_BM_FIELD + (cls & (FD_BM_FIELD - 1))];

	acc->w[0] &= b->w[0];
	acc->w[1] &= b->w[1];
	acc->w[2] &= b->w[2];
	acc->w[3] &= b->w[3];
	return (acc->w[0] | acc->w[1] | acc->w[2] | acc->w[3]) != 0;
}

/* fd_bm_and2 ANDs the OR of two classes' bitmaps of field fld into acc
 * (port: the rules its source port allows or its destination port does);
 * whether any rule is left. */
static __always_inline int fd_bm_and2(struct fd_bm *acc, const struct fd_cls_half *t,
				      __u32 fld, __u32 c1, __u32 c2)
{
	const struct fd_bm *a = &t->bm[fld * FD_BM_FIELD + (c1 & (FD_BM_FIELD - 1))];
	const struct fd_bm *b = &t->bm[fld * FD_BM_FIELD + (c2 & (FD_BM_FIELD - 1))];

	acc->w[0] &= a->w[0] | b->w[0];
	acc->w[1] &= a->w[1] | b->w[1];
	acc->w[2] &= a->w[2] | b->w[2];
	acc->w[3] &= a->w[3] | b->w[3];
	return (acc->w[0] | acc->w[1] | acc->w[2] | acc->w[3]) != 0;
}

/* The position of the lowest set bit of acc, -1 if none. */
static __always_inline int fd_bm_first(const struct fd_bm *acc)
{
	if (acc->w[0])
		return fd_ctz64(acc->w[0]);
	if (acc->w[1])
		return 64 + fd_ctz64(acc->w[1]);
	if (acc->w[2])
		return 128 + fd_ctz64(acc->w[2]);
	if (acc->w[3])
		return 192 + fd_ctz64(acc->w[3]);
	return -1;
}

/* The index of an IP frame with ports (TCP or UDP, so not a non-first
 * fragment) in FD_B64_PORTS: IPv6 << 17 | UDP << 16 | dport. TCP (6) and
 * UDP (17) differ in bit 0, and kind holds 8 for IPv6. */
static __always_inline __u32 fd_front_ports(const struct fd_pkt *p)
{
	return ((__u32)(p->kind & 8) << 14 | (__u32)(p->proto & 1) << 16 | p->dport) &
	       (FD_FRONT_PORTS_N - 1);
}

/* The index of an IP frame without ports in FD_B64_FRONT: IPv6 << 9 |
 * non-first fragment << 8 | protocol. */
static __always_inline __u32 fd_front_proto(const struct fd_pkt *p)
{
	return ((__u32)(p->kind & 8) << 6 | (__u32)(p->kind & 2) << 7 | p->proto) &
	       (FD_FRONT_PROTO_N - 1);
}

/* A direct field's value in frame p (FD_DIRECT_FIELDS). */
#define FD_DIR_VAL(p, MEMBER, BITS) ((__u32)(p)->MEMBER & ((1u << (BITS)) - 1))
/* Whether a direct field is read after the front table (1), and whether
 * an IP frame p has it. */
#define FD_AFTER_FRONT 0
#define FD_AFTER_PORTS 1
#define FD_AFTER_IP 1
#define FD_AFTER_ANY 1
#define FD_AFTER_EITHER 1 /* in FD_FLD_DIR_AFTER, but read by name */
#define FD_HAS_FRONT(p) 0
#define FD_HAS_EITHER(p) 0
#define FD_HAS_PORTS(p) ((p)->has_ports)
#define FD_HAS_IP(p) 1
#define FD_HAS_ANY(p) 1
/* The direct fields read after the front table, as fd_conf.fields bits. */
#define FD_X_AFTER(NAME, MEMBER, BITS, WHEN) | (FD_AFTER_##WHEN << FD_FLD_##NAME)
#define FD_FLD_DIR_AFTER (0 FD_DIRECT_FIELDS(FD_X_AFTER))

/* fd_compound's and fd_compound64's step for one direct field read after
 * the front table: AND the rules its value allows into acc, and give up
 * when none is left. For a field that is not of p's kind (clang knows
 * p's kind in each inlined copy, see fd_parse_then), or that no rule uses,
 * nothing but one test of fields. */
#define FD_X_AND(NAME, MEMBER, BITS, WHEN)                                                    \
	if (FD_AFTER_##WHEN && FD_HAS_##WHEN(p) && (fields & (1 << FD_FLD_##NAME))) {          \
		if (!fd_bm_and(&acc, t, FD_FLD_##NAME, t->tab[FD_DIR_##NAME + FD_DIR_VAL(p, MEMBER, BITS)])) \
			return -1;                                                             \
	}
#define FD_X_AND64(NAME, MEMBER, BITS, WHEN)                                          \
	if (FD_AFTER_##WHEN && FD_HAS_##WHEN(p) && (fields & (1 << FD_FLD_##NAME))) {  \
		acc &= t->b64[FD_DIR_##NAME + FD_DIR_VAL(p, MEMBER, BITS)];            \
		if (!acc)                                                              \
			return -1;                                                     \
	}
/* The same for a frame that is not IP: only the fields every frame has
 * (ANY; ether is read by name). */
#define FD_NONIP_FRONT 0
#define FD_NONIP_PORTS 0
#define FD_NONIP_IP 0
#define FD_NONIP_ANY 1
#define FD_NONIP_EITHER 0
#define FD_X_AND_NONIP(NAME, MEMBER, BITS, WHEN)                                              \
	if (FD_NONIP_##WHEN && (fields & (1 << FD_FLD_##NAME))) {                              \
		if (!fd_bm_and(&acc, t, FD_FLD_##NAME, t->tab[FD_DIR_##NAME + FD_DIR_VAL(p, MEMBER, BITS)])) \
			return -1;                                                             \
	}
#define FD_X_AND64_NONIP(NAME, MEMBER, BITS, WHEN)                    \
	if (FD_NONIP_##WHEN && (fields & (1 << FD_FLD_##NAME)))         \
		acc &= t->b64[FD_DIR_##NAME + FD_DIR_VAL(p, MEMBER, BITS)];

/* fd_off6_fail sets fail (its first words words) to the rules that have
 * an IPv6 prefix with an offset (FD_FLD_OFF6, src or dst ADDR/LEN/OFF) which
 * the frame's address does not have: the bits OFF to LEN-1 of the address
 * masked and compared with each of the noff6 entries. A rule has at most
 * one such prefix per field, so one that misses rules it out. Only the
 * full path calls it, for IPv6 frames of rule sets that have one. */
static __always_inline void fd_off6_fail(const struct fd_conf *c, const struct fd_cls_half *t,
					 const struct fd_pkt *p, struct fd_bm *fail, const int words)
{
	__u32 n = c->noff6, dst = c->off6_dst;
	int i, k;

	for (k = 0; k < FD_BM_WORDS; k++)
		fail->w[k] = 0;
	for (i = 0; i < FD_OFF6_MAX; i++) {
		const struct fd_bm *e = &t->bm[FD_BM_OFF6 + 2 * i];
		const __u64 *a;
		__u64 miss;

		if (i >= n)
			break;
		a = (dst >> i) & 1 ? p->dst6 : p->src6;
		miss = ((a[0] & e->w[0]) ^ e->w[2]) | ((a[1] & e->w[1]) ^ e->w[3]);
		miss = -(__u64)(miss != 0);
		for (k = 0; k < words; k++)
			fail->w[k] |= e[1].w[k] & miss;
	}
}

/* fd_compound returns the position of the first compound rule that
 * matches p, or -1. Each field used by some rule maps the frame's value to
 * the set of rules that field allows (a bitmap); the AND of those sets,
 * starting from what the frame's kind allows, holds the matching rules, and
 * its lowest bit is the first in file order (Lakshman and Stiliadis's bit
 * vector search, as in bpf-iptables). Fields no rule uses cost one test.
 * An IP frame starts from its front class (FD_TAB_FPORTS): the AND of
 * what its kind, EtherType, protocol and destination port allow, one
 * class read and one bitmap instead of four (256 rules, measured A/B: the
 * worst frame 4.5-5.0x -> 3.6-3.7x bare, TCP to 443 3.1-3.3x ->
 * 2.2-2.4x). Inlined: as a global function it took p by pointer, which
 * kept the frame's fields in memory on every packet's path. Only the fields
 * in mask are looked at: the plain path (fd_run) passes FD_FLD_PLAIN, a
 * constant, so its copy has no step for any other field. */
static __always_inline int fd_compound(const struct fd_conf *c, const struct fd_cls_half *t,
				       const struct fd_pkt *p, __u32 mask)
{
	struct fd_bm acc;
	__u32 fields, cls;

	if (!c || !t || !p)
		return -1;
	fields = c->fields & mask;
	if (!p->family) {
		/* Not IP: only the EtherType and the queue. */
		acc = c->kind[0];
		if (fields & (1 << FD_FLD_ETHER)) {
			if (!fd_bm_and(&acc, t, FD_FLD_ETHER, t->tab[FD_DIR_ETHER + p->ethertype]))
				return -1;
		}
		FD_DIRECT_FIELDS(FD_X_AND_NONIP)
		return fd_bm_first(&acc);
	}
	if (p->has_ports)
		cls = t->tab[FD_TAB_FPORTS + fd_front_ports(p)];
	else
		cls = t->tab[FD_TAB_FPROTO + fd_front_proto(p)];
	acc = t->bm[FD_BM_FRONT + (cls & (FD_BM_FRONTS - 1))];
	if (!(acc.w[0] | acc.w[1] | acc.w[2] | acc.w[3]))
		return -1;
	FD_DIRECT_FIELDS(FD_X_AND)
	/* port: either port's rules (see FD_DIRECT_FIELDS, EITHER). */
	if (p->has_ports && (fields & (1 << FD_FLD_PORT))) {
		if (!fd_bm_and2(&acc, t, FD_FLD_PORT, t->tab[FD_DIR_PORT + p->sport],
				t->tab[FD_DIR_PORT + p->dport]))
			return -1;
	}
	if (p->family == 4) {
		if (fields & (1 << FD_FLD_SRC4)) {
			if (!fd_bm_and(&acc, t, FD_FLD_SRC4, fd_trie4(t, FD_TAB_SRC4, p->src4)))
				return -1;
		}
		if (fields & (1 << FD_FLD_DST4)) {
			if (!fd_bm_and(&acc, t, FD_FLD_DST4, fd_trie4(t, FD_TAB_DST4, p->dst4)))
				return -1;
		}
	} else {
		if (fields & (1 << FD_FLD_SRC6)) {
			if (!fd_bm_and(&acc, t, FD_FLD_SRC6, fd_trie6(t, 0, p->src6[0], p->src6[1])))
				return -1;
		}
		if (fields & (1 << FD_FLD_DST6)) {
			if (!fd_bm_and(&acc, t, FD_FLD_DST6, fd_trie6(t, 1, p->dst6[0], p->dst6[1])))
				return -1;
		}
		if (fields & (1u << FD_FLD_OFF6)) {
			struct fd_bm fail;

			fd_off6_fail(c, t, p, &fail, FD_BM_WORDS);
			acc.w[0] &= ~fail.w[0];
			acc.w[1] &= ~fail.w[1];
			acc.w[2] &= ~fail.w[2];
			acc.w[3] &= ~fail.w[3];
		}
	}
	return fd_bm_first(&acc);
}

/* fd_trie4w looks an IPv4 address (host order) up in the two-level trie
 * of field dst (0: source, 1: destination) and returns its class: one
 * read for a leaf above /21, two below, where fd_trie4 takes up to three. */
static __always_inline __u32 fd_trie4w(const struct fd_cls_half *t, __u32 dst, __u32 a)
{
	__u32 e = t->tab[FD_TAB_W4 + ((dst & 1) << 20) + (a >> 12)];

	fd_opaque(e);
	if (e & FD_TAB_EXT)
		e = t->tab[FD_TAB_W4POOL + ((e & (FD_TAB_W4CHUNKS - 1)) << 12) + (a & 0xfff)];
	return e & (FD_BM_FIELD - 1);
}

/* The fields fd_compound64 looks up after the front table of an IPv4
 * frame with ports. */
#define FD_FLD4_ALL (1 << FD_FLD_SPORT | 1 << FD_FLD_SRC4 | 1 << FD_FLD_DST4)
/* The fields an IPv4 frame with ports may look up after its front table:
 * with FD_FLD4_ALL exactly, fd_compound64 takes its fast path. */
#define FD_FLD4_AFTER (FD_FLD_DIR_AFTER | 1 << FD_FLD_SRC4 | 1 << FD_FLD_DST4)
_Static_assert((FD_FLD4_AFTER & FD_FLD4_ALL) == FD_FLD4_ALL, "the fast path's fields are read after the front");

/* fd_compound64 is fd_compound for at most 64 rules: a bitmap is one
 * word, and an IP frame's first read (a front table, see FD_B64_PORTS)
 * gives the rules that its kind, EtherType, protocol and destination port
 * allow, where fd_compound reads four tables for them; the source port and
 * the addresses follow, each one read (addresses: the trie's, then one;
 * IPv4 in the two-level tries, fd_trie4w). Measured A/B, 64 rules and 10k
 * prefixes, the worst frame: front tables 3.1-3.3x -> 2.85-2.9x bare, the
 * two-level IPv4 tries 2.78-2.84x -> 2.62-2.70x; TCP to port 443 2.5x ->
 * 2.05-2.2x. fd_parse_then inlines it once per kind of frame, so the tests
 * of p's kind cost nothing. It returns fd_ctz_hash of the first matching
 * rule's bit (fd_conf.crule_h holds the rules' vals by it), or -1. */
static __always_inline int fd_compound64(const struct fd_conf *c, const struct fd_cls_half *t,
					 const struct fd_pkt *p, __u32 mask)
{
	__u32 fields;
	__u64 acc;

	if (!c || !t || !p)
		return -1;
	fields = c->fields & mask;
	if (p->has_ports) {
		acc = t->b64[FD_B64_PORTS + fd_front_ports(p)];
	} else if (p->family) {
		acc = t->b64[FD_B64_FRONT + fd_front_proto(p)];
	} else {
		/* Not IP: only the EtherType and the queue. */
		acc = c->kind[0].w[0];
		if (fields & (1 << FD_FLD_ETHER))
			acc &= t->b64[FD_DIR_ETHER + p->ethertype];
		FD_DIRECT_FIELDS(FD_X_AND64_NONIP)
		return acc ? fd_ctz_hash(acc) : -1;
	}
	if (!acc)
		return -1;
	if (p->family == 4 && p->has_ports && (fields & FD_FLD4_AFTER) == FD_FLD4_ALL) {
		/* The rule sets of an attack use them all, and no other field
		 * read after the front table: one test instead of three (the
		 * worst frame 2.44x -> 2.32x bare, A/B). */
		acc &= t->b64[FD_DIR_SPORT + p->sport];
		if (!acc)
			return -1;
		acc &= t->b64[FD_B64_SRC4 + fd_trie4w(t, 0, p->src4)];
		if (!acc)
			return -1;
		acc &= t->b64[FD_B64_DST4 + fd_trie4w(t, 1, p->dst4)];
		return acc ? fd_ctz_hash(acc) : -1;
	}
	FD_DIRECT_FIELDS(FD_X_AND64)
	/* port: either port's rules (see FD_DIRECT_FIELDS, EITHER). */
	if (p->has_ports && (fields & (1 << FD_FLD_PORT))) {
		acc &= t->b64[FD_DIR_PORT + p->sport] | t->b64[FD_DIR_PORT + p->dport];
		if (!acc)
			return -1;
	}
	if (p->family == 4) {
		if (fields & (1 << FD_FLD_SRC4)) {
			acc &= t->b64[FD_B64_SRC4 + fd_trie4w(t, 0, p->src4)];
			if (!acc)
				return -1;
		}
		if (fields & (1 << FD_FLD_DST4)) {
			acc &= t->b64[FD_B64_DST4 + fd_trie4w(t, 1, p->dst4)];
			if (!acc)
				return -1;
		}
	} else {
		if (fields & (1 << FD_FLD_SRC6)) {
			acc &= t->b64[FD_B64_SRC6 + (fd_trie6(t, 0, p->src6[0], p->src6[1]) &
						     (FD_BM_FIELD - 1))];
			if (!acc)
				return -1;
		}
		if (fields & (1 << FD_FLD_DST6)) {
			acc &= t->b64[FD_B64_DST6 + (fd_trie6(t, 1, p->dst6[0], p->dst6[1]) &
						     (FD_BM_FIELD - 1))];
			if (!acc)
				return -1;
		}
		if (fields & (1u << FD_FLD_OFF6)) {
			struct fd_bm fail;

			fd_off6_fail(c, t, p, &fail, 1);
			acc &= ~fail.w[0];
			if (!acc)
				return -1;
		}
	}
	return fd_ctz_hash(acc);
}

/* ---- prefix rules ---- */

/* DIR-24-8 lookup of a host-order IPv4 address: one read, two when the
 * /24 holds longer prefixes. */
static __always_inline __u32 fd_v4_lookup(const struct fd_half *h, __u32 a)
{
	const struct fd_v4_sparse *s;
	const __u32 *g;
	__u32 e, k, b;
	int i;

	e = h->tbl24[a >> 8];
	if (!(e & FD_V4_EXT))
		return e;
	k = e & FD_V4_ID;
	if (!(e & FD_V4_SPARSE)) {
		g = bpf_map_lookup_elem(&fd_v4_tbl8, &k);
		return g ? g[a & 0xff] : 0;
	}
	s = bpf_map_lookup_elem(&fd_v4_sparse, &k);
	if (!s)
		return 0;
	b = a & 0xff;
#pragma unroll
	for (i = 0; i < FD_V4_SPARSE_MAX; i++) {
		if (i >= s->n)
			break;
		if (s->key[i] == b)
			return s->val[i];
	}
	return s->def;
}

/* The hash of a masked IPv6 prefix; fastdrop/compile_v6.go computes the
 * same. Multiply-shift (the table index is the top bits, which every input
 * bit below them reaches): two independent multiplications, so a probe
 * waits for one, not for a chain of three. The seed is changed by user
 * space if some key would need more than FD_V6_PROBES probes. */
static __always_inline __u64 fd_v6_hash(__u64 hi, __u64 lo, __u64 len, __u64 seed)
{
	return (hi ^ seed) * 0x9e3779b97f4a7c15ULL + (lo ^ len << 56) * 0xc2b2ae3d27d4eb4fULL;
}

static __always_inline __u64 fd_mask64(__u32 bits)
{
	/* bits in 1..64; as loaded from the packet (big-endian bytes read
	 * little-endian), the mask keeps the first bits bytes. */
	if (bits >= 64)
		return ~0ULL;
	return __builtin_bswap64(~0ULL << (64 - bits));
}

/* fd_v6_probe looks (mh, ml, len) up in this half's hash table and returns
 * flags << 32 | val, or 0 if absent. Linear probing with Robin Hood
 * insertion: keys along a run are in order of distance from home, so a
 * search ends at an entry closer to its home than the key would be; user
 * space keeps every key within FD_V6_PROBES of its home. */
static __always_inline __u64 fd_v6_probe(const struct fd_conf *c, const struct fd_v6_ent *tab,
					  __u64 mh, __u64 ml, __u32 len)
{
	__u32 idx, mask;
	int j;

	mask = c->v6_mask;
	idx = fd_v6_hash(mh, ml, len, c->v6_seed) >> (c->v6_shift & 63);
	for (j = 0; j < FD_V6_PROBES; j++) {
		__u32 k = (idx + j) & mask;
		const struct fd_v6_ent *e;

		/* Never true (the table in use fits the map); it tells the
		 * verifier so. */
		if (k >= fd_v6_cap)
			return 0;
		e = &tab[k];
		if (!(e->flags & FD_V6_USED) || e->dist < j)
			return 0;
		if (e->hi == mh && e->lo == ml && e->len == len)
			return (__u64)e->flags << 32 | e->val;
	}
	return 0;
}

/* fd_v6_lookup: binary search on the distinct prefix lengths. A hit (a
 * prefix, or a marker left by a longer prefix) sends the search to longer
 * lengths and remembers the best prefix rule known there; a miss sends it
 * to shorter ones. */
__noinline __u32 fd_v6_lookup(const struct fd_conf *c, __u64 hi, __u64 lo)
{
	const struct fd_v6_ent *tab;
	__u32 best, node = 1;
	int d;

	if (!c)
		return 0;
	best = c->v6_default;
	tab = bpf_map_lookup_elem(&fd_v6_tab, &c->half);
	if (!tab)
		return best;
	for (d = 0; d < FD_V6_DEPTH; d++) {
		__u32 len = c->v6_tree[node & 255];
		__u64 mh, ml, r;

		if (!len)
			break;
		if (len <= 64) {
			mh = hi & fd_mask64(len);
			ml = 0;
		} else {
			mh = hi;
			ml = lo & fd_mask64(len - 64);
		}
		r = fd_v6_probe(c, tab, mh, ml, len);
		if (r) {
			if ((__u32)r)
				best = (__u32)r;
			if (!((r >> 32) & FD_V6_MARKER))
				break;
			node = node * 2 + 1;
		} else {
			node = node * 2;
		}
		if (node > 255)
			break;
	}
	return best;
}

/* ---- destination prefix rules (full path only, FD_FEAT_DST) ---- */

/* fd_v4_lookup on the destination table's maps: a copy rather than one
 * function of both, so that the plain path's code (which has the source
 * lookup only) is exactly what it was. (IPv6 needs no copy: fd_v6_lookup
 * takes the table's parameters, fd_half.dconf.) */
static __always_inline __u32 fd_d4_lookup(__u32 half, __u32 a)
{
	const struct fd_v4_sparse *s;
	const __u32 *t, *g;
	__u32 e, k, b;
	int i;

	t = bpf_map_lookup_elem(&fd_d4_tbl24, &half);
	if (!t)
		return 0;
	e = t[(a >> 8) & fd_d4_mask];
	if (!(e & FD_V4_EXT))
		return e;
	k = e & FD_V4_ID;
	if (!(e & FD_V4_SPARSE)) {
		g = bpf_map_lookup_elem(&fd_d4_tbl8, &k);
		return g ? g[a & 0xff] : 0;
	}
	s = bpf_map_lookup_elem(&fd_d4_sparse, &k);
	if (!s)
		return 0;
	b = a & 0xff;
#pragma unroll
	for (i = 0; i < FD_V4_SPARSE_MAX; i++) {
		if (i >= s->n)
			break;
		if (s->key[i] == b)
			return s->val[i];
	}
	return s->def;
}

/* fd_prefix4_full and fd_prefix6_full are the full path's prefix stage:
 * with destination prefix rules (FD_FEAT_DST), the longest destination
 * prefix first, then the longest source prefix; the val, 0 if none.
 * Global functions, which the verifier checks once rather than on every
 * path into the prefix stage: a test of FD_FEAT_DST there, or the
 * destination lookups inlined, made the full path too big to verify (more
 * than 1M instructions processed, from 0.67M). */
__noinline __u32 fd_prefix4_full(const struct fd_half *h, __u32 src, __u32 dst)
{
	__u32 v = 0;

	if (!h)
		return 0;
	if ((h->conf.features & FD_FEAT_DST) && h->conf.d4_count)
		v = fd_d4_lookup(h->conf.half, dst);
	if (!v && h->conf.v4_count)
		v = fd_v4_lookup(h, src);
	return v;
}

__noinline __u32 fd_prefix6_full(const struct fd_half *h, __u64 shi, __u64 slo, __u64 dhi, __u64 dlo)
{
	__u32 v = 0;

	if (!h)
		return 0;
	if ((h->conf.features & FD_FEAT_DST) && h->conf.d6_count)
		v = fd_v6_lookup(&h->dconf, dhi, dlo);
	if (!v && h->conf.v6_count)
		v = fd_v6_lookup(&h->conf, shi, slo);
	return v;
}

/* ---- policing: limit rules and bans ---- */

/* The time in ns (CLOCK_MONOTONIC), or the test clock. */
static __always_inline __u64 fd_now_ns(void)
{
	if (fd_test_clock) {
		__u32 zero = 0;
		struct fd_police *pe = bpf_map_lookup_elem(&fd_policers, &zero);

		return pe ? pe->tat : 0;
	}
	return bpf_ktime_get_ns();
}

/* The policers' clock, in ns: jiffies times a jiffy's length (or the
 * test clock). bpf_ktime_get_ns costs a frame about 50 ns on this
 * project's VMs (it reads the TSC); bpf_jiffies64 is one load (the
 * verifier inlines it). Its steps of a tick (4 ms at HZ=250) would cap
 * what a bucket shallower than a tick lets through at its depth per tick;
 * user space adds a tick to every bucket's depth (fd_police.burst), which
 * makes the rate exact on average: after each step the bucket has room
 * for the step's worth of frames. Its origin is not CLOCK_MONOTONIC's:
 * bans keep both (struct fd_ban). */
static __always_inline __u64 fd_pol_now(void)
{
	if (fd_test_clock == 2 && fd_tick_ns) {
		__u64 t = fd_now_ns();

		return t - t % fd_tick_ns;
	}
	if (fd_test_clock || !fd_tick_ns)
		return fd_now_ns();
	return bpf_jiffies64() * fd_tick_ns;
}

/* The tick added to every bucket's depth (see fd_pol_now), in 1/16 ns. */
static __always_inline __u64 fd_pol_tolerance(void)
{
	return fd_test_clock == 1 ? 0 : fd_tick_ns << FD_POL_TIME_SHIFT;
}

/* fd_src_mask puts the source (hi, lo as fd_banned takes them) masked to
 * len bits into k. Frames without a source (not IP) all get one key. */
static __always_inline void fd_src_mask(struct fd_src_key *k, __u32 family, __u64 hi, __u64 lo,
					__u32 len)
{
	k->hi = 0;
	k->lo = 0;
	if (family == 4) {
		if (len >= 32)
			k->hi = hi & 0xffffffffULL;
		else if (len)
			k->hi = hi & (0xffffffffULL << (32 - len)) & 0xffffffffULL;
	} else if (family == 6) {
		if (len > 64) {
			k->hi = hi;
			k->lo = lo & fd_mask64(len > 128 ? 64 : len - 64);
		} else if (len) {
			k->hi = hi & fd_mask64(len);
		}
	}
}

/* fd_bans_end is fd_policers[0].ban_end (see struct fd_police). */
static __always_inline __u64 *fd_bans_end(void)
{
	__u32 zero = 0;
	struct fd_police *pe = bpf_map_lookup_elem(&fd_policers, &zero);

	return pe ? &pe->ban_end : 0;
}

/* fd_bans_note raises fd_policers[0].ban_end to end (a ban was made). */
static __always_inline void fd_bans_note(__u64 end)
{
	__u64 *p = fd_bans_end(), old, prev;
	int i;

	if (!p)
		return;
	old = *(volatile __u64 *)p;
	for (i = 0; i < 4 && end > old; i++) {
		prev = __sync_val_compare_and_swap(p, old, end);
		if (prev == old)
			break;
		old = prev;
	}
}

/* fd_banned_look reports whether the source (IPv4: host order in hi;
 * IPv6: as loaded from the packet) is banned, looked up under each length
 * of lens (one per byte, see fd_conf.ban4), and counts the frame in the
 * ban. A ban past its time is deleted. */
static __noinline int fd_banned_look(__u32 lens, __u32 family, __u64 hi, __u64 lo)
{
	struct fd_src_key k = {};
	struct fd_ban *b;
	int i;

	for (i = 0; i < FD_BAN_LENS; i++) {
		__u32 len = (lens >> (i * 8)) & 0xff;

		if (!len)
			break;
		fd_src_mask(&k, family, hi, lo, len);
		k.id = family << 8 | len;
		b = bpf_map_lookup_elem(&fd_bans, &k);
		if (!b)
			continue;
		if (fd_pol_now() < b->end) {
			__sync_fetch_and_add(&b->dropped, 1);
			return 1;
		}
		bpf_map_delete_elem(&fd_bans, &k);
	}
	return 0;
}

/* fd_banned is fd_banned_look, skipped (a load and a compare, no call)
 * while no ban can be live: after the end of the latest ban made. */
static __always_inline int fd_banned(__u32 lens, __u32 family, __u64 hi, __u64 lo)
{
	__u64 *end = fd_bans_end();

	if (!end || fd_pol_now() >= *(volatile __u64 *)end)
		return 0;
	return fd_banned_look(lens, family, hi, lo);
}

/* fd_src_set_of is the set of fd_pol_src of a source masked into k (see
 * struct fd_src_ent): of the source alone, its rule told apart by the
 * tag. */
static __always_inline __u32 fd_src_set_of(const struct fd_src_key *k)
{
	return ((k->hi ^ (k->lo * 0xff51afd7ed558ccdULL)) * 0x9e3779b97f4a7c15ULL) >> 40 &
	       fd_src_sets_mask;
}

/* This CPU's counters of police entry idx. */
static __always_inline struct fd_pcnt *fd_pcnt_of(__u32 idx)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct fd_pcnt *row = bpf_map_lookup_elem(&fd_pol_cnt, &cpu);

	return row ? &row[idx & (FD_POLICE_MAX - 1)] : 0;
}

/* fd_police_run polices a frame of bytes that limit rule idx (the number
 * in its val) matched, and returns the val it gets: pass if it conforms,
 * drop if it exceeds, with the rule's counter slot. The source as for
 * fd_banned. See struct fd_police for the algorithm. Two CPUs that read a
 * bucket at once may both let a frame through where one would: at most
 * one frame per CPU above the bucket. */
static __always_inline __u32 fd_police_run(__u32 idx, __u32 family, __u64 hi, __u64 lo, __u32 bytes)
{
	__u32 key = idx & (FD_POLICE_MAX - 1);
	struct fd_police *pe = bpf_map_lookup_elem(&fd_policers, &key);
	__u64 now_ns, now, cost, old, t, *tat;
	struct fd_src_key k = {};
	struct fd_pcnt *pc;

	if (!pe)
		return FD_ACT_PASS << FD_VAL_ACT_SHIFT | (FD_SLOT_DEFAULT + FD_ACT_PASS);
	now_ns = fd_pol_now();
	now = now_ns << FD_POL_TIME_SHIFT;
	cost = pe->cost;
	if (pe->flags & FD_LIM_BYTES)
		cost = (bytes & 0x3ffff) * cost >> FD_POL_BYTE_SHIFT;
	tat = &pe->tat;
	if (pe->flags & FD_LIM_PERSRC) {
		struct fd_src_set *set;
		struct fd_src_ent *w, *victim;
		__u64 tag;
		__u32 si, evicted;
		int i;

		fd_src_mask(&k, family, hi, lo, family == 4 ? pe->len4 : pe->len6);
		k.id = key | family << 16;
		k.epoch = pe->epoch;
		/* See struct fd_src_ent. */
		tag = (k.hi ^ (k.lo * 0xff51afd7ed558ccdULL) ^ ((__u64)k.epoch << 32 | k.id)) *
		      0x9e3779b97f4a7c15ULL;
		si = fd_src_set_of(&k);
		set = bpf_map_lookup_elem(&fd_pol_src, &si);
		if (!set)
			return FD_ACT_PASS << FD_VAL_ACT_SHIFT | (pe->slot & FD_VAL_SLOT_MASK);
		tat = 0;
		victim = &set->way[0];
		/* Stops at the source's way: the second line is read only
		 * for the sources there and for new ones. */
		for (i = 0; i < FD_SRC_WAYS; i++) {
			w = &set->way[i];
			if (w->tag == tag) {
				tat = &w->tat;
				break;
			}
			/* Full ways (tat <= now) are alike: the first wins. */
			if (w->tat < victim->tat && victim->tat > now)
				victim = w;
		}
		if (!tat) {
			/* A fresh bucket is full: the frame conforms. It takes
			 * the way that would be full soonest (an empty one's
			 * tat is 0). Two CPUs doing this at once in one set
			 * may take one way: then one source starts again
			 * with a full bucket. */
			evicted = victim->tag != 0;
			victim->tat = now + cost;
			victim->tag = tag;
			pc = fd_pcnt_of(key);
			if (pc) {
				pc->sources++;
				pc->evicted += evicted;
			}
			return FD_ACT_PASS << FD_VAL_ACT_SHIFT | (pe->slot & FD_VAL_SLOT_MASK);
		}
	}
	old = *(volatile __u64 *)tat;
	t = old > now ? old : now;
	/* A tick more than the bucket's depth: see fd_pol_now. */
	if (t + cost > now + pe->burst + fd_pol_tolerance()) {
		pc = fd_pcnt_of(key);
		if (pc) {
			pc->exceed_packets++;
			pc->exceed_bytes += bytes;
		}
		if (pe->ban_ns && (pe->flags & FD_LIM_PERSRC) && family) {
			/* Once per ban: the source's next frames meet it
			 * before the rules. */
			__u64 mono = fd_now_ns();
			struct fd_ban b = {
				.until = mono + pe->ban_ns,
				.since = mono,
				.end = now_ns + pe->ban_ns,
				.slot = pe->slot,
				.epoch = pe->epoch,
			};

			struct fd_ban *old_ban;
			int err;

			k.id = family << 8 | (family == 4 ? pe->len4 : pe->len6);
			k.epoch = 0;
			err = bpf_map_update_elem(&fd_bans, &k, &b, BPF_NOEXIST);
			/* One that ended and was not looked up since (fd_banned
			 * skips the lookup once every ban has ended) is
			 * replaced; a live one stays as it is. */
			if (err && (old_ban = bpf_map_lookup_elem(&fd_bans, &k)) && old_ban->end <= now_ns)
				err = bpf_map_update_elem(&fd_bans, &k, &b, BPF_EXIST);
			if (!err) {
				fd_bans_note(b.end);
				if (pc)
					pc->bans++;
			}
		}
		return FD_ACT_DROP << FD_VAL_ACT_SHIFT | (pe->slot & FD_VAL_SLOT_MASK);
	}
	/* Conforms: move tat by cost, from now if the bucket was full. */
	if (old > now || __sync_val_compare_and_swap(tat, old, now + cost) != old)
		__sync_fetch_and_add(tat, cost);
	return FD_ACT_PASS << FD_VAL_ACT_SHIFT | (pe->slot & FD_VAL_SLOT_MASK);
}

/* ---- the whole evaluation ---- */

/* fd_ports reads the ports of a first TCP or UDP fragment at pos and adds
 * them to p, with full also the TCP flags; -1 if the header is cut
 * short. */
static __always_inline int fd_ports(struct fd_pkt *p, void *pos, void *data_end, const int full)
{
	__u32 need = p->proto == IPPROTO_TCP ? 20 : 8;
	__u32 ports;

	if (pos + need > data_end)
		return -1;
	if (pos + 4 > data_end)
		return -1;
	/* Both ports in one load: sport in the high half. */
	ports = bpf_ntohl(*(__u32 *)pos);
	p->tcpflags = 0;
	if (full && p->proto == IPPROTO_TCP) {
		if (pos + 20 > data_end)
			return -1;
		p->tcpflags = ((__u8 *)pos)[13];
	}
	p->sport = ports >> 16;
	p->dport = ports & 0xffff;
	p->has_ports = 1;
	p->kind |= 1;
	return 0;
}

/* fd_icmp reads the type and code of a first ICMP or ICMPv6 fragment at
 * pos and adds them to p (with full: the plain path reads neither); -1 if
 * its first 4 bytes (type, code, checksum) are cut short. */
static __always_inline int fd_icmp(struct fd_pkt *p, void *pos, void *data_end, const int full)
{
	if (pos + 4 > data_end)
		return -1;
	if (!full)
		return 0;
	p->icmp_type = ((__u8 *)pos)[0];
	p->icmp_code = ((__u8 *)pos)[1];
	return 0;
}

/* What fd_decide needs besides the frame. */
struct fd_env {
	const struct fd_half *h;
	const __u32 *len; /* as fd_parse_then's */
};

/* A frame's verdict from its parsed fields, or, with p NULL, a malformed
 * frame's. Passed to fd_parse_then as a constant and inlined there. */
typedef struct fd_result (*fd_decide_fn)(const void *arg, const struct fd_pkt *p);

/* fd_malformed is decide(arg, NULL) for a malformed frame, whose whole
 * length the caller is to read (see fd_parse_then). */
static __always_inline struct fd_result fd_malformed(__u32 *len, fd_decide_fn decide,
						     const void *arg)
{
	*len |= PARSE_LEN_CHECK;
	return decide(arg, NULL);
}

/* fd_parse_then parses the frame at ctx and returns decide(arg, fields),
 * or decide(arg, NULL) for a malformed frame. Each kind of frame (IPv4 or
 * IPv6, with ports or without, not IP) gets its own inlined copy of
 * decide, in which clang knows what the kind fixes (family, ports, which
 * fields are set) and carries no other kind's fields in registers or on
 * the stack: merging the kinds before deciding made clang spill most
 * fields (measured A/B: 64 rules + 10k prefixes, the worst frame 2.65x ->
 * 2.45x bare; every row faster). Only the fields that the frame's kind
 * makes meaningful are written (addresses of its family, ports when it has
 * them), and readers look at no others.
 *
 * *len comes in as the length of the frame's first buffer. For a frame
 * that may go on past it (non-IP and malformed frames, and IP frames whose
 * length field reaches past it) it goes out with PARSE_LEN_CHECK set:
 * the caller then reads the whole length (fd_check_len). An IP frame that
 * ends in its first buffer needs no helper call.
 *
 * full (a constant) 0 is the plain path's parser (fd_run): it sets only the
 * fields of FD_FLD_PLAIN and what the frame's kind needs, and leaves the
 * others 0; its decide must read no other. Which frames are malformed does
 * not depend on it. */
static __always_inline struct fd_result fd_parse_then(struct xdp_md *ctx, __u32 *len,
						      fd_decide_fn decide, const void *arg,
						      const int full)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct hdr_cursor nh = { .pos = data, .len = len };
	struct fd_pkt p;
	int et, proto;

	et = parse_ethhdr(&nh, data_end);
	if (et < 0)
		return fd_malformed(len, decide, arg);
	p.ethertype = et;
	p.nonfirst = 0;
	p.has_ports = 0;
	/* Never read unless the kind says so, but clang may still spill
	 * them (an undefined register), which the verifier refuses. */
	p.sport = 0;
	p.dport = 0;
	p.tcpflags = 0;
	p.icmp_type = 0;
	p.icmp_code = 0;
	p.queue = 0;
	if (full)
		p.queue = ctx->rx_queue_index < FD_QUEUES ? ctx->rx_queue_index : FD_QUEUES;

	if (et == ETH_P_IP) {
		struct iphdr *iph;

		proto = parse_iphdr(&nh, data_end, &iph);
		if (proto < 0)
			return fd_malformed(len, decide, arg);
		p.family = 4;
		p.proto = proto;
		p.ttl = 0;
		p.dscp = 0;
		p.pktlen = 0;
		p.fragbits = 0;
		p.flowlabel = 0;
		if (full) {
			p.ttl = iph->ttl;
			p.dscp = iph->tos >> 2;
			p.pktlen = bpf_ntohs(iph->tot_len);
			p.fragbits = frag_bits(bpf_ntohs(iph->frag_off) & 0x1fff,
					       iph->frag_off & bpf_htons(0x2000)) |
				     (iph->frag_off & bpf_htons(0x4000) ? PARSE_FRAG_DF : 0);
		}
		p.src4 = bpf_ntohl(iph->saddr);
		p.dst4 = bpf_ntohl(iph->daddr);
		if (iph->frag_off & bpf_htons(0x1fff)) {
			p.nonfirst = 1;
			p.kind = 4 | 2;
			return decide(arg, &p);
		}
		p.kind = 4;
		if (proto == IPPROTO_TCP || proto == IPPROTO_UDP) {
			if (fd_ports(&p, nh.pos, data_end, full) < 0)
				return fd_malformed(len, decide, arg);
			return decide(arg, &p);
		}
		if ((proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6) &&
		    fd_icmp(&p, nh.pos, data_end, full) < 0)
			return fd_malformed(len, decide, arg);
		return decide(arg, &p);
	}
	if (et == ETH_P_IPV6) {
		struct ipv6hdr *ip6h;
		__u32 vtf;

		proto = parse_ip6hdr(&nh, data_end, &ip6h);
		if (proto < 0)
			return fd_malformed(len, decide, arg);
		p.ttl = 0;
		p.pktlen = 0;
		p.dscp = 0;
		p.flowlabel = 0;
		if (full) {
			p.ttl = ip6h->hop_limit;
			p.pktlen = 40 + (__u32)bpf_ntohs(ip6h->payload_len);
			/* Traffic class: the 8 bits after the version; then the
			 * flow label. */
			vtf = bpf_ntohl(*(__be32 *)ip6h);
			p.dscp = (vtf >> 22) & 0x3f;
			p.flowlabel = vtf & 0xfffff;
		}
		__builtin_memcpy(p.src6, &ip6h->saddr, 16);
		__builtin_memcpy(p.dst6, &ip6h->daddr, 16);
		p.fragbits = PARSE_FRAG_V6;
		proto = skip_ip6hdrext(&nh, data_end, proto, &p.fragbits);
		if (proto < 0)
			return fd_malformed(len, decide, arg);
		p.nonfirst = !!(p.fragbits & PARSE_FRAG_NF);
		p.family = 6;
		p.proto = proto;
		p.src4 = 0;
		p.dst4 = 0;
		if (p.nonfirst) {
			p.kind = 8 | 2;
			return decide(arg, &p);
		}
		p.kind = 8;
		if (proto == IPPROTO_TCP || proto == IPPROTO_UDP) {
			if (fd_ports(&p, nh.pos, data_end, full) < 0)
				return fd_malformed(len, decide, arg);
			return decide(arg, &p);
		}
		if ((proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6) &&
		    fd_icmp(&p, nh.pos, data_end, full) < 0)
			return fd_malformed(len, decide, arg);
		return decide(arg, &p);
	}
	/* Not IP: nothing says how long the frame is but the frame. */
	*len |= PARSE_LEN_CHECK;
	p.family = 0;
	p.kind = 0;
	p.proto = 0;
	p.ttl = 0;
	p.dscp = 0;
	p.pktlen = 0;
	p.flowlabel = 0;
	p.fragbits = 0;
	p.src4 = 0;
	p.dst4 = 0;
	return decide(arg, &p);
}

/* fd_decide_in evaluates a frame: malformed, then compound rules, then the
 * longest destination prefix (full path only), then the longest source
 * prefix, then the default policy. full (a constant) 0 is
 * the plain path's (fd_run), for a rule set with no fd_conf.features: no
 * bans, limits or late rules, and no field beyond FD_FLD_PLAIN. */
static __always_inline struct fd_result fd_decide_in(const void *arg, const struct fd_pkt *p,
						     const int full)
{
	const struct fd_env *env = arg;
	const struct fd_half *h = env->h;
	const struct fd_conf *c = &h->conf;
	struct fd_result r = {}, late = {};
	int i;

	if (!p) {
		r.class = FD_CLASS_MALFORMED;
		r.val = (c->malformed << FD_VAL_ACT_SHIFT) |
			(FD_SLOT_MALFORMED + (c->malformed & 3));
		return r;
	}

	/* Bans first (IPv4 frames carry their address in hi). */
	if (full && p->family == 4 && c->ban4 && fd_banned(c->ban4, 4, p->src4, 0))
		goto banned;
	if (full && p->family == 6 && c->ban6 && fd_banned(c->ban6, 6, p->src6[0], p->src6[1]))
		goto banned;

	if (c->ncompound) {
		const struct fd_cls_half *t = &h->cls;

		if (c->ncompound <= 64) {
			i = fd_compound64(c, t, p, full ? ~0u : FD_FLD_PLAIN);
			if (i >= 0) {
				r.class = FD_CLASS_COMPOUND;
				r.index = fd_ctz_tab[i & 63]; /* for the trace only */
				r.val = c->crule_h[i & 63];
				if (!full || r.index < c->late_from)
					goto compound;
				late = r;
				r.val = 0;
			}
		} else {
			i = fd_compound(c, t, p, full ? ~0u : FD_FLD_PLAIN);
			if (i >= 0) {
				r.class = FD_CLASS_COMPOUND;
				r.index = i & (FD_MAX_COMPOUND - 1);
				r.val = c->crule[r.index];
				if (!full || r.index < c->late_from)
					goto compound;
				late = r;
				r.val = 0;
			}
		}
	}

	/* The full path: with destination prefix rules, their table
	 * before the source one (fd_prefix4_full), so that a frame both
	 * match is decided by its destination's rule (as when "drop dst P"
	 * was a compound rule, judged before every prefix rule). */
	if (full) {
		if (p->family == 4)
			r.val = fd_prefix4_full(h, p->src4, p->dst4);
		else if (p->family == 6)
			r.val = fd_prefix6_full(h, p->src6[0], p->src6[1], p->dst6[0], p->dst6[1]);
	} else if (p->family == 4 && c->v4_count)
		r.val = fd_v4_lookup(h, p->src4);
	else if (p->family == 6 && c->v6_count)
		r.val = fd_v6_lookup(c, p->src6[0], p->src6[1]);
	if (r.val) {
		r.class = FD_CLASS_PREFIX;
		r.index = 0;
		return r;
	}
	/* A late compound rule matched and no prefix rule did. */
	if (full && late.val) {
		r = late;
		goto compound;
	}

	r.class = FD_CLASS_DEFAULT;
	r.val = (c->policy << FD_VAL_ACT_SHIFT) | (FD_SLOT_DEFAULT + (c->policy & 3));
	return r;

compound:
	/* Only a limit rule's val has bit 31 (FD_ACT_LIMIT). */
	if (full && (r.val & (1u << 31))) {
		__u32 bytes = *env->len & ~PARSE_LEN_CHECK;
		__u32 family = p->family;
		__u64 hi = 0, lo = 0;

		if (family == 4) {
			hi = p->src4;
		} else if (family == 6) {
			hi = p->src6[0];
			lo = p->src6[1];
		} else {
			family = 0;
		}
		r.val = fd_police_run(r.val, family, hi, lo, bytes);
	}
	return r;

banned:
	r.class = FD_CLASS_BAN;
	r.val = FD_ACT_DROP << FD_VAL_ACT_SHIFT | FD_SLOT_BANNED;
	return r;
}

static __always_inline struct fd_result fd_decide(const void *arg, const struct fd_pkt *p)
{
	return fd_decide_in(arg, p, 1);
}

static __always_inline struct fd_result fd_decide_plain(const void *arg, const struct fd_pkt *p)
{
	return fd_decide_in(arg, p, 0);
}

/* fd_match evaluates one frame against one half of the rule set; *len as
 * for fd_parse_then; full as for fd_decide_in (a constant). */
static __always_inline struct fd_result fd_match(const struct fd_half *h, struct xdp_md *ctx,
						 __u32 *len, const int full)
{
	struct fd_env env = { .h = h, .len = len };

	if (!full)
		return fd_parse_then(ctx, len, fd_decide_plain, &env, 0);
	return fd_parse_then(ctx, len, fd_decide, &env, 1);
}

/* fd_check_len finishes a frame that fd_match flagged with
 * PARSE_LEN_CHECK in *len: reads its whole length into *len and, if that
 * is shorter than its IP length field needs, makes it malformed under h's
 * configuration. ctx and h come from stack slots: kept in registers
 * through the match they would cost every frame spills. */
static __always_inline void fd_check_len(struct xdp_md *volatile *ctx,
					 const struct fd_half *volatile *h, __u32 *len,
					 struct fd_result *r)
{
	__u32 whole = bpf_xdp_get_buff_len(*ctx);

	if ((*len & ~PARSE_LEN_CHECK) > whole) {
		struct fd_env env = { .h = *h, .len = len };

		*r = fd_decide(&env, NULL);
	}
	*len = whole;
}

static __always_inline __u32 fd_val_action(__u32 val)
{
	return (val >> FD_VAL_ACT_SHIFT) & 3;
}

/* The XDP verdict of an action for a program with no sockets (the LPM
 * trie benchmark's, lpmtrie.c): redirect passes. */
static __always_inline __u32 fd_xdp_action(__u32 act)
{
	return act == FD_ACT_DROP ? XDP_DROP : XDP_PASS;
}

/* fd_redirect hands the frame to the AF_XDP socket of its rx queue, or
 * to the stack when none is bound there (bpf_redirect_map's flags are the
 * verdict for an empty slot), and counts which by queue. */
static __noinline int fd_redirect(__u32 queue, __u64 bytes)
{
	__u32 q = queue < FD_QUEUES ? queue : FD_QUEUES;
	__u32 key;
	int verdict = bpf_redirect_map(&fd_xsks, queue, XDP_PASS);
	struct counter *c;

	key = q * FD_XSK_VERDICTS + (verdict == XDP_REDIRECT ? FD_XSK_REDIRECTED : FD_XSK_NO_SOCKET);
	c = bpf_map_lookup_elem(&fd_xsk_counters, &key);
	if (c)
		count(c, bytes);
	return verdict;
}

/* The XDP verdict for an action. */
static __always_inline __u32 fd_xdp_verdict(struct xdp_md *ctx, __u32 act, __u64 bytes)
{
	if (act == FD_ACT_DROP)
		return XDP_DROP;
	if (act == FD_ACT_REDIRECT)
		return fd_redirect(ctx->rx_queue_index, bytes);
	return XDP_PASS;
}

static __always_inline __u32 fd_val_slot(__u32 val)
{
	return val & FD_VAL_SLOT_MASK;
}

/* fd_count adds the frame to counter slot of this CPU. The verifier
 * knows fd_counter_slots (read-only data) and so the row's bounds. */
static __always_inline void fd_count(__u32 slot, __u64 bytes)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct counter *row = bpf_map_lookup_elem(&fd_counters, &cpu);

	if (row && slot < fd_counter_slots)
		count(&row[slot], bytes);
}

/* ---- captures (capture.h) ---- */

/* fd_cap_send puts a sample of the frame together in pc and writes it
 * into ring; non-zero if the ring is full. how: verdict << 8 | class,
 * and FD_CAP_F_RULE << 16 for a rule's sample modifier. */
static __always_inline long fd_cap_send(struct xdp_md *ctx, void *ring, struct fd_cap_cpu *pc,
					__u32 snaplen, __u32 val, __u32 nonce, __u32 how, __u32 len)
{
	__u32 caplen = snaplen < len ? snaplen : len;

	/* Opaque: clang would otherwise test a copy, and the verifier must
	 * see the bounds on the register the helper gets. */
	fd_opaque(caplen);
	if (caplen >= 1 && caplen <= FD_CAP_SNAP_MAX) {
		if (bpf_xdp_load_bytes(ctx, 0, pc->data, caplen) < 0)
			caplen = 0;
	} else {
		caplen = 0;
	}
	pc->rec.tstamp = bpf_ktime_get_ns();
	pc->rec.len = len;
	pc->rec.caplen = caplen;
	pc->rec.val = val;
	pc->rec.nonce = nonce;
	pc->rec.cpu = bpf_get_smp_processor_id();
	pc->rec.queue = ctx->rx_queue_index;
	pc->rec.verdict = how >> 8;
	pc->rec.class = how;
	pc->rec.flags = how >> 16;
	return bpf_ringbuf_output(ring, &pc->rec, sizeof(pc->rec) + (caplen & 0x3fff), 0);
}

/* fd_cap_one sends the frame to capture slot i if its selection takes
 * it. bits: the frame's FD_CAP_V_* bits. */
static __always_inline void fd_cap_one(struct xdp_md *ctx, const struct fd_cap_sel *sel,
				       struct fd_cap_cpu *pc, __u32 i, __u32 bits, __u32 val,
				       __u32 class, __u32 verdict, __u32 len)
{
	struct fd_cap_cnt *c = &pc->cnt[i & (FD_CAP_SLOTS - 1)];
	__u32 nonce = sel->nonce;
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
	if (fd_cap_send(ctx, ring, pc, sel->snaplen, val, nonce, verdict << 8 | class, len))
		c->lost++;
	else
		c->sent++;
}

/* fd_cap_rule sends 1 in N of the frames of a rule with a sample
 * modifier to fd_cap_samples: those whose count in the rule's counter
 * (this CPU's, which fd_count has just raised) is a multiple of N. */
static __always_inline void fd_cap_rule(struct xdp_md *ctx, struct fd_cap_cpu *pc, __u32 cpu,
					__u32 slot, __u32 val, __u32 verdict, __u32 len)
{
	const struct fd_rule_rec *rec = bpf_map_lookup_elem(&fd_rules, &slot);
	struct counter *row;
	__u32 n;

	if (!rec || !(n = rec->sample))
		return;
	row = bpf_map_lookup_elem(&fd_counters, &cpu);
	if (!row || slot >= fd_counter_slots || row[slot].packets % n)
		return;
	if (fd_cap_send(ctx, &fd_cap_samples, pc, FD_CAP_RULE_SNAP, val, 0,
			FD_CAP_F_RULE << 16 | verdict << 8, len))
		pc->rule_lost++;
	else
		pc->rule_sent++;
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
	if ((active & FD_CAP_RULES) && slot >= FD_SLOT_RULES)
		fd_cap_rule(ctx, pc, cpu, slot, val, verdict, len);
	return 0;
}

#endif /* XDPDROP_FASTDROP_H */

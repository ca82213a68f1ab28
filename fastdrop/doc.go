// Package fastdrop drops, passes or redirects frames at the XDP hook
// according to a rule file. Redirect hands a frame to the AF_XDP socket
// registered for its rx queue (RegisterSocket, sockets.go): the same
// program serves xdpdrop drop and xdpdrop redirect. Rules carry an origin
// (origin.go), so that several sources share the program and each changes
// only its own rules (ApplyOrigin); origins order the compound rules, and
// the late ones (redirect) come after the prefix rules.
//
// A rule file (syntax in docs/RULES.md) is parsed by [Parse] or [ParseFile]
// into a [RuleSet]. Rules come in two classes: compound rules (any match
// other than a lone source prefix), evaluated in file order with the first
// match winning, and prefix rules ("ACTION src PREFIX"), looked up by longest
// prefix match after no compound rule matched. Frames that match nothing get
// the rule set's policy; frames that cannot be parsed get its malformed
// verdict.
//
// A limit rule (action [ActionLimit], [Rule.Limit]) is a compound rule that
// polices what it matches: a token bucket (GCRA) per rule, shared by the
// CPUs through atomics, or one per source prefix in a fixed-size LRU
// table; conforming frames pass, the excess is dropped, and with a ban the
// source is dropped before any rule for the ban's duration, which the
// kernel ends by itself ([Engine.Bans], [Engine.Unban]). A compound rule's
// val with action 4 names its policer (struct fd_police) instead of its
// counter slot; the program resolves it into a drop or pass val with the
// slot. [Counters] split a limit rule's frames in [LimitCounter].
//
// [Model] is a plain Go implementation of exactly these semantics (for
// limit rules: which rule decides; the verdict it gives is a fresh
// bucket's first frame's, pass). It is
// the oracle the kernel program is tested against, not a fast path.
//
// # Match fields
//
// Each match field (src, dst, proto, sport, dport, ether, frag, ttl,
// flags, queue, dscp, type, code) is one entry of matchFields in
// fields.go: its keyword and aliases, how its value is parsed and printed,
// where it sits in [Rule] (offset and store kind), what [Rule.Validate]
// checks about it, how the model matches it, and how
// it is kept in a rule record (its FD_REC_* flag and the members of struct
// fd_rule_rec it uses). The parser's keywords, [Rule.String],
// [Rule.Validate], [Rule.IsPrefixOnly], the model and the record encoding
// all loop over that table. To add a field:
//
//   - add its Go field to [Rule] and its entry to matchFields, with
//     examples, which TestMatchFields parses, prints and round-trips and
//     TestRecordLayout sends through a record (a value kind that is new
//     needs a storeKind and a case in matchField.isSet);
//   - give it room in struct fd_rule_rec and an FD_REC_* flag in
//     bpf/fastdrop.h (TestRecordLayout checks the entry's offsets against
//     the object's BTF; raise FD_LAYOUT_VERSION);
//   - read its bytes in the C frame parser (fd_pkt) and in the model's
//     parseFrame;
//   - a field looked up by an 8- or 16-bit value of the frame (ether,
//     proto, ports, ttl, flags, dscp, ICMP type and code) is a direct field: give its entry a direct member
//     (its enum fd_field value, FD_DIR_ offset, bits and the spans of
//     values a rule allows) and add it to FD_DIRECT_FIELDS and enum
//     fd_field in bpf/fastdrop.h; the compiler (classifier.direct) and
//     the C classifiers then handle it with no code of its own
//     (TestDirectFields checks the two sides agree). Its frames member
//     says which frames can match it (kindAllows);
//   - add tests and document it in docs/RULES.md.
package fastdrop

// Package fastdrop drops, passes or redirects frames at the XDP hook
// according to a rule file.
//
// A rule file (syntax in docs/RULES.md) is parsed by [Parse] or [ParseFile]
// into a [RuleSet]. Rules come in two classes: compound rules (any match
// other than a lone source prefix), evaluated in file order with the first
// match winning, and prefix rules ("ACTION src PREFIX"), looked up by longest
// prefix match after no compound rule matched. Frames that match nothing get
// the rule set's policy; frames that cannot be parsed get its malformed
// verdict.
//
// [Model] is a plain Go implementation of exactly these semantics. It is
// the oracle the kernel program is tested against, not a fast path.
//
// # Match fields
//
// Each match field (src, dst, proto, sport, dport, ether, frag) is one
// entry of matchFields in fields.go: its keyword and aliases, how its value
// is parsed and printed, where it sits in [Rule] (offset and store kind),
// what [Rule.Validate] checks about it, and how the model matches it. The
// parser's keywords, [Rule.String], [Rule.Validate], [Rule.IsPrefixOnly]
// and the model all loop over that table. To add a field:
//
//   - add its Go field to [Rule] and its entry to matchFields (with
//     examples, which TestMatchFields parses, prints and round-trips); a
//     value kind that is new needs a storeKind and a case in
//     matchField.isSet;
//   - read its bytes in the C frame parser (bpf/fastdrop.h, fd_pkt) and in
//     the model's parseFrame;
//   - encode it in the rule record and compile its classifier table:
//     these are not yet table-driven (encodeRecord, decodeRecordInto and
//     compileCompound in compile.go, struct fd_rule_rec and enum fd_field
//     in bpf/fastdrop.h; raise FD_LAYOUT_VERSION);
//   - add tests and document it in docs/RULES.md.
package fastdrop

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
package fastdrop

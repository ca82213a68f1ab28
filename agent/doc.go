// Package agent is the long-running data plane behind `xdpdrop agent`: it
// keeps the fast-drop program of each configured interface fed with the
// rules of its rule files (reloaded when they change) and with the BGP
// FlowSpec routes (RFC 8955, RFC 8956) that its neighbours announce to the
// BGP speaker it runs (github.com/osrg/gobgp/v3, embedded).
//
// A [Config] is read from YAML by [LoadConfig], strictly: an unknown key is
// an error that names its line. [New] checks it and [Agent.Run] runs until
// its context ends. Every change (a rule file written, SIGHUP through
// [Agent.Reload], a route announced or withdrawn, a session lost) marks the
// agent dirty; one reconcile pass then builds each interface's whole rule
// set (file rules first, then the FlowSpec rules in RFC 8955 section 5.1
// order) and swaps it in atomically through package fastdrop, so that a
// burst of announcements is one swap, never a gap.
//
// A FlowSpec route becomes rules only when the rule language can express it
// exactly ([Translate]); otherwise it is refused, never widened or narrowed,
// and the reason is logged and listed in [Status]. A rule file that fails to
// parse keeps its last good rules in force, and says why in the log and in
// status. The agent never detaches: stopped, or killed, it leaves the last
// rule set in force, and a new agent adopts the pinned program.
package agent

// Package benchmark measures the classic XDP and AF_XDP figures on the
// machine it runs on, in the shape of the tables the kernel patch series
// published: drop rates at the TC hook, in generic and native XDP and
// through fast drop with large rule sets; AF_XDP rxdrop, txonly and l2fwd
// with the application on the kernel's core or another, with need_wakeup
// off and on, with preferred busy polling and its budgets, and at several
// frame sizes.
//
// Plan lists the standard rows (Case); Run measures each on a veth pair
// of its own (package sandbox, removed afterwards), or on an interface
// pair the caller names (Options.Pair). For each case it attaches what the
// case needs through package loader, opens the AF_XDP socket (package
// xsk), starts the application on a pinned thread and the traffic
// generator on the peer end, warms up, measures one window of
// Options.Duration and undoes everything it attached, opened or changed
// (also when the context is cancelled). It makes Options.Repeat such
// passes over all the cases, so that other work on the machine disturbs
// one repeat of several rows rather than every repeat of one, and reports
// each row's median and spread.
//
// Every frame is accounted for: from the start of the traffic to its end,
// after the rings drained, a Result says what was sent (the veth's own
// counters of what the generator put into the receiver's ring), what
// reached the measured stage (the programs' counters, the socket's), and
// where the rest was lost (a full veth ring, XDP_STATISTICS, a full TX
// ring, frames veth dropped on the way back).
//
// Where the work runs matters more than anything else on a small machine.
// Options.CPUs[0] runs the generator, and on veth also the receive work of
// the end under test, which veth does in the sender's context (there are
// no hardware queues or interrupts); AF_XDP applications run there too
// (OneCore) or on Options.CPUs[1] (TwoCores). Run the generator in another
// process (Command) when measuring AF_XDP: an in-process generator
// (InProcess, the default) costs a consumer in the same process much of
// its rate.
//
// Run needs root: it creates interfaces and namespaces, loads and
// attaches BPF programs, and opens AF_XDP sockets.
package benchmark

// Package xsk is a pure-Go AF_XDP socket: UMEM, the four rings shared with
// the kernel, a batch receive/transmit API whose frames are views into the
// UMEM (no copy, no allocation per packet), a Run loop, and the plain
// redirect program that hands a device queue's frames to a socket.
//
// # Setup
//
// An AF_XDP socket is bound to one rx/tx queue of one device. Frames reach
// it only through an XDP program that redirects into an XSKMAP. Redirect
// is the plain one (every frame of the selected queues, with counters per
// queue and verdict; no rules), loaded but not attached: attach Program()
// with package loader or link.AttachXDP, then Register each socket. To
// choose frames by rules (the redirect action and the queue field of
// docs/RULES.md), register the sockets with a fastdrop.Engine instead:
// OpenQueues(RegisterFunc(engine.RegisterSocket), ...).
//
//	red, err := xsk.NewRedirect(xsk.RedirectOptions{})
//	// attach red.Program() to the device
//	s, err := xsk.Open(xsk.Options{Interface: "eth3", Queue: 0})
//	err = red.Register(s)
//	err = s.Run(ctx, func(frames []xsk.Frame, v []xsk.Verdict) error {
//		// inspect frames[i].Data; v[i] = xsk.Transmit to send it back out
//		return nil
//	})
//
// One socket per queue: to serve several queues open several sockets,
// each with a private UMEM (the default) or all sharing one (Options.UMEM,
// XDP_SHARED_UMEM), and drive each from its own goroutine. OpenQueues
// does that setup for a list of queues (ParseQueues reads one such as
// "0-3", AllQueues lists a device's) and registers every socket; the CLI,
// the benchmarks and examples/multiqueue all use it.
//
// # Modes the kernel may choose
//
// Open binds in copy mode, zero-copy mode or, by default, whichever the
// driver supports (Socket.ZeroCopy reports the kernel's choice, read back
// with XDP_OPTIONS). veth and other drivers without AF_XDP zero-copy refuse
// BindZeroCopy with ErrZeroCopyUnsupported. need_wakeup is on by default:
// the wakeup system calls (recvfrom for the fill ring, sendto for TX) are
// made only when the kernel flags the ring, except that copy-mode TX always
// needs sendto.
//
// # Frames and who holds them
//
// Every UMEM frame is in exactly one place: the UMEM's pool (not lent to a
// socket), a socket's free list, lent to the kernel for receiving (fill
// ring, driver, RX ring), held by the application, or lent to the kernel
// for sending (TX ring, driver, completion ring). Receive and Alloc hand
// frames to the application; Release and Transmit take them back; Complete
// moves sent frames to the free list. A frame is valid from the call that
// handed it out until the call that took it back: its Data aliases UMEM
// memory that the kernel will overwrite once the frame is lent again.
// Releasing a frame twice, or transmitting one that is not held, is
// refused with ErrInvalidFrame. Socket.Accounting and CheckFrames show and
// verify the books; UMEMOptions.Debug also checks every frame the kernel
// returns.
//
// # Goroutines
//
// A Socket is driven by one goroutine at a time: Receive, Release, Alloc,
// Transmit, Complete, Wait, Run, Accounting and CheckFrames never overlap
// on one socket, and a Run handler runs on the goroutine that called Run,
// so it may use them. Stats and the accessors may be called from any
// goroutine, and so may Close (but not from a Run handler), which stops a
// Run in progress and waits for it. Sockets are independent, also when they share a UMEM; a frame may
// move between two sockets (received on one, sent on the other) only when
// one goroutine drives both. UMEM and Redirect methods are safe for
// concurrent use.
//
// # Waiting
//
// When the RX ring is empty, Run waits as Options.Wait says: by default it
// re-checks the ring for a few microseconds and then sleeps in poll(), so
// a busy socket makes no system calls and an idle one uses no CPU. Other
// modes sleep at once, poll() before every batch, or never sleep.
// Preferred busy polling (Options.BusyPoll) makes those system calls run
// the driver's NAPI loop in the application's thread; it needs the device
// settings that SetNAPIDefer writes, and NAPIDeferNote says when they are
// missing.
//
// # Modes
//
// RxDrop, TxOnly and L2Fwd are the classic benchmark loops (receive and
// recycle; generate; swap MACs and send back out without a copy), used by
// the CLI and the benchmarks and usable as starting points. A socket that
// never sends can be opened without a TX ring (Options.RxOnly), as
// xdpsock opens rxdrop's: in copy mode every poll() on a socket with a TX
// ring also runs the kernel's transmit path for it.
package xsk

// Package pktgen sends frames out of an interface at the fastest rate this
// kernel allows without hardware help: it runs a tiny XDP program that
// returns XDP_TX through BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES,
// so every run really transmits the frame from the interface given as the
// ingress interface (on veth, to its peer).
//
// Send must be called from a thread inside the network namespace that owns
// the interface (see sandbox.InNS), since the kernel resolves the ifindex
// there. Run keeps several test runs in flight, from threads it starts in
// the caller's namespace and CPU affinity: a test run waits for two RCU
// grace periods unless another run of the same program is in progress
// (see RunOptions.InFlight). A Generator is safe for use by one goroutine
// at a time.
//
// FrameSpec builds the frames to send (Ethernet with optional VLAN tags,
// IPv4 or IPv6 with options, fragments and extension headers, TCP, UDP,
// ICMP or a raw protocol), with every length and checksum filled in and
// the offsets of the layers reported, which Options.IPOffset and
// L4Offset take. It panics on a FrameSpec that cannot be encoded.
package pktgen

// Package capture reads samples of frames, with the verdicts they got,
// from a running fast-drop program: what each rule catches and what still
// gets through, as the XDP program saw it (tcpdump never sees a frame that
// XDP dropped).
//
// A capture registers a Selection (verdicts, a rule's counter slot, an rx
// queue, 1 in N, at most N per second, a snap length) in one of the
// program's capture slots, with a BPF ring buffer of its own; the program
// copies each selected frame into that ring. Several captures (up to
// Slots) run at once, each with its own selection, ring and counts. The
// program never waits for a capture: a full ring loses the sample, counts
// it in Stats.Lost, and the frame keeps its verdict. With no capture
// registered the program pays one test of one word per frame.
//
// Close removes the registration, so the program is as fast as before.
// A capture that could not close (its process was killed) leaves its slot
// registered until the next capture on the same program finds its process
// gone and takes the slot over.
//
// Rules with a sample modifier ("drop udp dport 11211 sample 1/1000")
// send 1 in N of their frames to a ring that comes with the program, with
// no capture registered; ReadRuleSamples reads it (one reader at a time).
//
// Match filters samples in user space with the rule language (the
// fast-drop model judges the sampled bytes); the kernel's selection comes
// first, so a Selection used with a Match must not sample (Every, PerSecond):
// the caller samples what matched (Sampler).
package capture

// Package frames builds Ethernet frames for the project's BPF and
// integration tests.
//
// A [Spec] describes the layers (802.1Q/802.1ad tags, IPv4 with options and
// fragments, IPv6 with extension headers, then TCP, UDP, ICMP, ICMPv6 or a
// raw protocol, or a non-IP EtherType such as ARP or LLDP), and [Spec.Build]
// returns the bytes with every length and checksum filled in, together with
// the offsets of the IP header, the L4 header and the payload. [UDP4],
// [UDP6], [TCP4] and [TCP6] cover the common case in one line.
//
// Frames are meant to be damaged: [Frame.Truncate], [Frame.SetByte] and the
// Corrupt methods return modified copies and never touch the original, and
// [Mutate] applies one random structural mutation for differential fuzzing
// of a packet parser, with [Random] drawing valid Specs across all variants.
//
// The encoder itself is pktgen's ([pktgen.FrameSpec]), which product code
// (xdpdrop gen, demo and bench) uses directly; this package is test-only
// and adds the constructors, damage and randomisation on top. It allocates
// freely; it is for tests, not for a data path. Build and the constructors panic on a Spec
// that cannot be encoded (for example more than 40 bytes of IPv4 options,
// or addresses of different families): in a test, such a Spec is a bug in
// the test.
package frames

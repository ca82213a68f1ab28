// Package pcapng writes and reads capture files in the pcapng format
// (draft-ietf-opsawg-pcapng): a section header, interface descriptions
// with their snap length and name, and enhanced packet blocks with
// options (comments, the rx queue, the XDP verdict). It writes
// little-endian sections with nanosecond timestamps, which tcpdump,
// Wireshark and gopacket read; the reader reads those and sections of
// either byte order with any timestamp resolution, and returns each
// packet's options, which readers of classic pcap never see.
//
// It is small on purpose: what `xdpdrop capture` needs, with options
// that libraries such as gopacket's pcapgo do not write (epb_queue,
// epb_verdict).
package pcapng

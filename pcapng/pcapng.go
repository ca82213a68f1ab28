package pcapng

import (
	"time"
)

// Block types.
const (
	blockSHB = 0x0A0D0D0A
	blockIDB = 0x00000001
	blockEPB = 0x00000006
	blockSPB = 0x00000003
	blockOPB = 0x00000002 // obsolete packet block
)

const byteOrderMagic = 0x1A2B3C4D

// Option codes.
const (
	optEnd     = 0
	optComment = 1
	// Section header.
	shbUserAppl = 4
	// Interface description.
	ifName    = 2
	ifTsresol = 9
	// Enhanced packet.
	epbFlags   = 2
	epbQueue   = 6
	epbVerdict = 7
)

// LinkEthernet is LINKTYPE_ETHERNET.
const LinkEthernet = 1

// VerdictXDP is the type of an epb_verdict that holds an XDP action (a
// 64-bit number: XDP_DROP 1, XDP_PASS 2, XDP_REDIRECT 4...).
const VerdictXDP = 2

// Interface describes the interface packets were captured on.
type Interface struct {
	Name     string // if_name
	LinkType uint16 // LinkEthernet
	Snaplen  uint32 // 0: no limit
	// TsResol is the if_tsresol option as written (9: nanoseconds, 6:
	// microseconds); the reader converts timestamps with it.
	TsResol uint8
}

// Packet is an enhanced packet block.
type Packet struct {
	Interface int       // index of its Interface in the section
	Time      time.Time // with the interface's resolution
	Length    int       // on the wire; 0: len(Data)
	Data      []byte    // the captured bytes
	Comments  []string  // opt_comment, one option each
	// Queue is the epb_queue option (the rx queue), written when HasQueue.
	Queue    uint32
	HasQueue bool
	// Verdicts are epb_verdict options: a type byte (VerdictXDP) then
	// the verdict's bytes; see XDPVerdict.
	Verdicts [][]byte
}

// XDPVerdict is an epb_verdict of type VerdictXDP for XDP action a.
func XDPVerdict(a uint64) []byte {
	b := make([]byte, 9)
	b[0] = VerdictXDP
	putU64(b[1:], a)
	return b
}

// XDPAction returns the XDP action of an epb_verdict of type VerdictXDP,
// as the reader returned it, and false for any other.
func XDPAction(v []byte) (uint64, bool) {
	if len(v) != 9 || v[0] != VerdictXDP {
		return 0, false
	}
	return le64(v[1:]), true
}

func putU64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

func le64(b []byte) uint64 {
	var v uint64
	for i := range 8 {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}

func pad4(n int) int { return (n + 3) &^ 3 }

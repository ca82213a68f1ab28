package capture

import (
	"encoding/binary"
	"time"

	"github.com/xdpdrop/xdpdrop/gen"
)

// Sample is one frame as the program saw it, with its verdict.
type Sample struct {
	Time   time.Time // when the program judged it
	Length int       // the frame's length on the wire
	Data   []byte    // its first bytes, up to the snap length
	// Action is the XDP action the program returned (unix.XDP_DROP,
	// XDP_PASS, XDP_REDIRECT...).
	Action uint32
	// Verdict is that action as a Verdicts bit, with VerdictMalformed
	// added for a frame the parser refused.
	Verdict Verdicts
	// Slot is the counter slot that counted the frame: a rule's (see
	// fastdrop.Engine.RuleSlots) when RuleMatched, else the malformed or
	// default policy's.
	Slot        uint32
	RuleMatched bool
	Default     bool // no rule matched: the default policy gave the verdict
	CPU         int
	Queue       int // rx queue
	// RuleSample: the rule's sample modifier sent it (ReadRuleSamples).
	RuleSample bool

	nonce uint32
}

// The layout of a sample: struct fd_cap_rec, then the bytes.
const recSize = 40

var (
	slotDefault = uint32(gen.FastdropFdLayoutFD_SLOT_DEFAULT)
	slotRules   = uint32(gen.FastdropFdLayoutFD_SLOT_RULES)
	slotMask    = uint32(gen.FastdropFdLayoutFD_VAL_SLOT_MASK)
)

// decode fills s from a ring record; false if it is cut short.
func decode(b []byte, s *Sample, mono time.Duration) bool {
	if len(b) < recSize {
		return false
	}
	ne := binary.NativeEndian
	caplen := int(ne.Uint32(b[12:16]))
	if len(b) < recSize+caplen {
		return false
	}
	s.Time = time.Unix(0, int64(ne.Uint64(b[0:8]))+int64(mono))
	s.Length = int(ne.Uint32(b[8:12]))
	s.Data = b[recSize : recSize+caplen]
	val := ne.Uint32(b[16:20])
	s.nonce = ne.Uint32(b[20:24])
	s.CPU = int(ne.Uint32(b[24:28]))
	s.Queue = int(ne.Uint32(b[28:32]))
	s.Action = uint32(b[32])
	s.RuleSample = b[34]&byte(gen.FastdropFdCapLayoutFD_CAP_F_RULE) != 0
	s.Verdict = Verdicts(1) << (s.Action & 7)
	s.Slot = val & slotMask
	s.RuleMatched = s.Slot >= slotRules
	s.Default = s.Slot >= slotDefault && !s.RuleMatched
	if s.Slot < slotDefault {
		s.Verdict |= VerdictMalformed
	}
	return true
}

// VerdictName is the sample's verdict in words: drop, pass, redirect (or
// another XDP action's number), with " malformed" for a malformed frame.
func (s *Sample) VerdictName() string {
	n := actionName(s.Action)
	if s.Verdict&VerdictMalformed != 0 {
		n += " malformed"
	}
	return n
}

func actionName(a uint32) string {
	switch a {
	case 0:
		return "aborted"
	case 1:
		return "drop"
	case 2:
		return "pass"
	case 3:
		return "tx"
	case 4:
		return "redirect"
	}
	return "action " + string(rune('0'+a%10))
}

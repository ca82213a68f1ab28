package fastdrop

import (
	"encoding/binary"
	"net/netip"
	"strconv"
)

// ResultClass says which stage of evaluation decided a frame's verdict.
type ResultClass uint8

const (
	ClassMalformed ResultClass = iota + 1 // the frame failed parsing; RuleSet.Malformed applied
	ClassCompound                         // a compound rule matched
	ClassPrefix                           // a prefix rule matched (longest prefix)
	ClassDefault                          // nothing matched; RuleSet.Policy applied
	ClassBan                              // the source was banned by a limit rule (the kernel only)
)

func (c ResultClass) String() string {
	switch c {
	case ClassMalformed:
		return "malformed"
	case ClassCompound:
		return "compound"
	case ClassPrefix:
		return "prefix"
	case ClassDefault:
		return "default"
	case ClassBan:
		return "ban"
	}
	return "ResultClass(" + strconv.Itoa(int(c)) + ")"
}

// Result is the model's decision for one frame.
type Result struct {
	Verdict Action
	Class   ResultClass
	Rule    int // index into RuleSet.Rules of the matching rule, -1 if none
}

// Model evaluates frames against a rule set the way the kernel program must,
// written for clarity rather than speed: it is the oracle of the
// differential tests. It is safe for concurrent use by Eval.
type Model struct {
	rs       *RuleSet
	compound []int // indices of compound rules, in evaluation order (compoundOrder)
	early    int   // compound[early:] are late: after the prefix rules
	// Prefix rules by prefix length: prefix (masked address) -> rule
	// index; [0] the source table's, [1] the destination table's.
	v4 [2][33]map[netip.Addr]int
	v6 [2][129]map[netip.Addr]int
}

// NewModel returns a model of rs. rs must be valid (as Parse returns it, or
// checked with RuleSet.Validate) and must not change while the model is
// used.
func NewModel(rs *RuleSet) *Model {
	m := &Model{rs: rs}
	m.compound, m.early = compoundOrder(rs.Rules)
	for i, r := range rs.Rules {
		if !r.IsPrefixOnly() {
			continue
		}
		k := r.PrefixKey()
		t := 0
		if k.Dst {
			t = 1
		}
		var byLen map[netip.Addr]int
		if bits := k.Prefix.Bits(); k.Prefix.Addr().Is4() {
			if m.v4[t][bits] == nil {
				m.v4[t][bits] = make(map[netip.Addr]int)
			}
			byLen = m.v4[t][bits]
		} else {
			if m.v6[t][bits] == nil {
				m.v6[t][bits] = make(map[netip.Addr]int)
			}
			byLen = m.v6[t][bits]
		}
		if _, dup := byLen[k.Prefix.Addr()]; !dup { // first one wins; Validate rejects duplicates anyway
			byLen[k.Prefix.Addr()] = i
		}
	}
	return m
}

// packet is what the frame parser extracts; the fields rules match on.
type packet struct {
	etherType uint16 // after the VLAN tags
	isIP      bool   // IPv4 or IPv6 (etherType 0x0800 or 0x86dd)
	src, dst  netip.Addr
	proto     uint8 // IPv4 protocol or IPv6 final next header
	ttl       uint8 // IPv4 TTL or IPv6 hop limit
	tcpFlags  uint8 // TCP header byte 13, when hasPorts and TCP
	dscp      uint8 // IPv4 TOS / IPv6 traffic class >> 2
	pktLen    int   // len: IPv4 total length, IPv6 40 + payload length
	fragBits  uint8 // Frag* bits (and fragV6)
	hasICMP   bool  // ICMP or ICMPv6 (protocol 1 or 58), not a non-first fragment
	icmpType  uint8
	icmpCode  uint8
	fragment  bool // non-first fragment (offset != 0)
	hasPorts  bool // TCP or UDP and not a non-first fragment
	sport     uint16
	dport     uint16
	queue     uint32 // the rx queue it arrived on
	flowLabel uint32 // IPv6's flow label (20 bits)
}

// Eval returns the verdict for frame, which starts at the Ethernet header,
// as if it arrived on rx queue 0.
func (m *Model) Eval(frame []byte) Result { return m.EvalOn(frame, 0) }

// EvalOn returns the verdict for frame arriving on rx queue queue:
// compound rules in order, prefix rules (the longest destination prefix,
// then the longest source prefix), late compound rules (origin.go), the
// policy.
func (m *Model) EvalOn(frame []byte, queue uint32) Result {
	pkt, ok := parseFrame(frame)
	if !ok {
		return Result{Verdict: m.rs.EffectiveMalformed(), Class: ClassMalformed, Rule: -1}
	}
	pkt.queue = queue
	for _, i := range m.compound[:m.early] {
		if matches(&m.rs.Rules[i], &pkt) {
			return m.compoundResult(i)
		}
	}
	if pkt.isIP {
		if i, ok := m.longestPrefix(1, pkt.dst); ok {
			return Result{Verdict: m.rs.Rules[i].Action, Class: ClassPrefix, Rule: i}
		}
		if i, ok := m.longestPrefix(0, pkt.src); ok {
			return Result{Verdict: m.rs.Rules[i].Action, Class: ClassPrefix, Rule: i}
		}
	}
	for _, i := range m.compound[m.early:] {
		if matches(&m.rs.Rules[i], &pkt) {
			return m.compoundResult(i)
		}
	}
	return Result{Verdict: m.rs.EffectivePolicy(), Class: ClassDefault, Rule: -1}
}

// compoundResult is the result of a frame that compound rule i decides.
// A limit rule's verdict depends on time and the frames before: the model
// gives that of the first frame of a fresh bucket, which conforms.
func (m *Model) compoundResult(i int) Result {
	v := m.rs.Rules[i].Action
	if v == ActionLimit {
		v = ActionPass
	}
	return Result{Verdict: v, Class: ClassCompound, Rule: i}
}

// longestPrefix returns the prefix rule of table t (0 source, 1
// destination) with the longest prefix containing a.
func (m *Model) longestPrefix(t int, a netip.Addr) (int, bool) {
	tables := m.v6[t][:]
	if a.Is4() {
		tables = m.v4[t][:]
	}
	for bits := len(tables) - 1; bits >= 0; bits-- {
		if tables[bits] == nil {
			continue
		}
		p, _ := a.Prefix(bits)
		if i, ok := tables[bits][p.Addr()]; ok {
			return i, true
		}
	}
	return 0, false
}

// matches reports whether the compound rule r matches pkt: every field that
// is set must match.
func matches(r *Rule, pkt *packet) bool {
	for i := range matchFields {
		if f := &matchFields[i]; f.isSet(r) && !f.match(r, pkt) {
			return false
		}
	}
	return true
}

// Limits of the frame parser, shared with the kernel program.
const (
	MaxVLANTags       = 2
	MaxIPv6ExtHeaders = 4
)

// parseFrame implements "How frames are read" of docs/RULES.md. ok is false
// for a malformed frame. Every "present" check counts against the end of
// the frame, not the IP total or payload length.
func parseFrame(b []byte) (pkt packet, ok bool) {
	pkt, ok, _ = parseFrameExtent(b)
	return pkt, ok
}

// HeaderExtent returns how many leading bytes of frame the parser reads to
// judge it (the end of the last header it reads): the verdict depends on
// those bytes and on the frame's length, never on the bytes after them. A
// frame cut at n bytes (a capture's snap length) and padded back to its
// length is judged as the whole frame was if HeaderExtent(padded) <= n.
func HeaderExtent(frame []byte) int {
	_, _, ext := parseFrameExtent(frame)
	return ext
}

// parseFrameExtent is parseFrame, and also returns the extent of the
// bytes it read: the largest n for which it needed the first n bytes
// present and found them.
func parseFrameExtent(b []byte) (pkt packet, ok bool, ext int) {
	be := binary.BigEndian
	// have reports whether the first n bytes are present and records
	// that they were read.
	have := func(n int) bool {
		if n > len(b) {
			return false
		}
		ext = max(ext, n)
		return true
	}
	if !have(14) {
		return pkt, false, ext
	}
	et := be.Uint16(b[12:14])
	off := 14
	for tags := 0; et == EtherTypeVLAN || et == EtherTypeQinQ; tags++ {
		if tags == MaxVLANTags {
			return pkt, false, ext // a third tag
		}
		if !have(off + 4) {
			return pkt, false, ext
		}
		et = be.Uint16(b[off+2 : off+4])
		off += 4
	}
	pkt.etherType = et

	var l4 int
	switch et {
	case EtherTypeIPv4:
		if !have(off + 20) {
			return pkt, false, ext
		}
		ip := b[off:]
		ihl := int(ip[0]&0x0f) * 4
		totalLen := int(be.Uint16(ip[2:4]))
		if ip[0]>>4 != 4 || ihl < 20 || !have(off+ihl) || totalLen < ihl || totalLen > len(ip) {
			return pkt, false, ext
		}
		pkt.isIP = true
		pkt.src = netip.AddrFrom4([4]byte(ip[12:16]))
		pkt.dst = netip.AddrFrom4([4]byte(ip[16:20]))
		pkt.proto = ip[9]
		pkt.ttl = ip[8]
		pkt.dscp = ip[1] >> 2
		pkt.pktLen = totalLen
		pkt.fragment = be.Uint16(ip[6:8])&0x1fff != 0
		{
			fo := be.Uint16(ip[6:8])
			pkt.fragBits = fragBitsOf(fo&0x1fff, fo&0x2000 != 0)
			if fo&0x4000 != 0 {
				pkt.fragBits |= FragDF
			}
		}
		l4 = off + ihl
	case EtherTypeIPv6:
		if !have(off + 40) {
			return pkt, false, ext
		}
		ip := b[off:]
		if ip[0]>>4 != 6 || 40+int(be.Uint16(ip[4:6])) > len(ip) {
			return pkt, false, ext
		}
		pkt.isIP = true
		pkt.ttl = ip[7]
		pkt.dscp = (ip[0]<<4 | ip[1]>>4) >> 2
		pkt.flowLabel = be.Uint32(ip[0:4]) & 0xfffff
		pkt.pktLen = 40 + int(be.Uint16(ip[4:6]))
		pkt.src = netip.AddrFrom16([16]byte(ip[8:24]))
		pkt.dst = netip.AddrFrom16([16]byte(ip[24:40]))
		pkt.fragBits = fragV6
		nh := ip[6]
		cur := off + 40
		for n := 0; isIPv6ExtHeader(nh); n++ {
			if n == MaxIPv6ExtHeaders {
				return pkt, false, ext // a fifth extension header
			}
			var hlen int
			switch nh {
			case 44: // fragment: fixed 8 bytes
				hlen = 8
			case 51: // AH: length in 4-byte units, minus 2
				if !have(cur + 2) {
					return pkt, false, ext
				}
				hlen = (int(b[cur+1]) + 2) * 4
			default: // hop-by-hop, routing, destination options: 8-byte units, minus 1
				if !have(cur + 2) {
					return pkt, false, ext
				}
				hlen = (int(b[cur+1]) + 1) * 8
			}
			if !have(cur + hlen) {
				return pkt, false, ext
			}
			isFrag := nh == 44
			if isFrag {
				fo := be.Uint16(b[cur+2 : cur+4])
				pkt.fragBits = fragV6 | fragBitsOf(fo>>3, fo&1 != 0)
			}
			fragOff := isFrag && be.Uint16(b[cur+2:cur+4])>>3 != 0
			nh = b[cur]
			cur += hlen
			if fragOff {
				// What follows a non-first fragment header is fragment
				// data, not headers: stop here (see Amendments).
				pkt.fragment = true
				break
			}
		}
		pkt.proto = nh
		l4 = cur
	default:
		return pkt, true, ext // not IP: only ether-only rules can match
	}

	if pkt.fragment {
		return pkt, true, ext // no L4 header in a non-first fragment
	}
	switch pkt.proto {
	case ProtoTCP, ProtoUDP:
		need := 8
		if pkt.proto == ProtoTCP {
			need = 20
		}
		if !have(l4 + need) {
			return pkt, false, ext
		}
		pkt.hasPorts = true
		pkt.sport = be.Uint16(b[l4 : l4+2])
		pkt.dport = be.Uint16(b[l4+2 : l4+4])
		if pkt.proto == ProtoTCP {
			pkt.tcpFlags = b[l4+13]
		}
	case ProtoICMP, ProtoICMPv6:
		// Type, code and checksum: the header every ICMP message has.
		if !have(l4 + 4) {
			return pkt, false, ext
		}
		pkt.hasICMP = true
		pkt.icmpType, pkt.icmpCode = b[l4], b[l4+1]
	}
	return pkt, true, ext
}

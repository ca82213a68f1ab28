package frames

import "github.com/xdpdrop/xdpdrop/pktgen"

// The encoder is pktgen's (product code builds frames there); this package
// adds the constructors, damage and randomisation that only tests need.
// Spec and Frame are defined types over pktgen's so that they can carry
// those methods; VLAN and ExtHeader are the same types.

// EtherTypes and VLAN tag protocol identifiers.
const (
	EtherTypeIPv4 = pktgen.EtherTypeIPv4
	EtherTypeARP  = pktgen.EtherTypeARP
	EtherTypeIPv6 = pktgen.EtherTypeIPv6
	EtherTypeLLDP = pktgen.EtherTypeLLDP
	TPID8021Q     = pktgen.TPID8021Q
	TPID8021AD    = pktgen.TPID8021AD
)

// IP protocol numbers, as found in the IPv4 Protocol and IPv6 Next Header
// fields.
const (
	ProtoHopByHop = pktgen.ProtoHopByHop
	ProtoICMP     = pktgen.ProtoICMP
	ProtoTCP      = pktgen.ProtoTCP
	ProtoUDP      = pktgen.ProtoUDP
	ProtoRouting  = pktgen.ProtoRouting
	ProtoFragment = pktgen.ProtoFragment
	ProtoGRE      = pktgen.ProtoGRE
	ProtoESP      = pktgen.ProtoESP
	ProtoAH       = pktgen.ProtoAH
	ProtoICMPv6   = pktgen.ProtoICMPv6
	ProtoNoNext   = pktgen.ProtoNoNext
	ProtoDestOpts = pktgen.ProtoDestOpts
	ProtoSCTP     = pktgen.ProtoSCTP
)

// TCP flags for Spec.TCPFlags.
const (
	TCPFin = pktgen.TCPFin
	TCPSyn = pktgen.TCPSyn
	TCPRst = pktgen.TCPRst
	TCPPsh = pktgen.TCPPsh
	TCPAck = pktgen.TCPAck
	TCPUrg = pktgen.TCPUrg
	TCPEce = pktgen.TCPEce
	TCPCwr = pktgen.TCPCwr
)

// Header lengths without options.
const (
	EthernetLen = pktgen.EthernetLen
	VLANLen     = pktgen.VLANLen
	IPv4Len     = pktgen.IPv4Len
	IPv6Len     = pktgen.IPv6Len
	TCPLen      = pktgen.TCPLen
	UDPLen      = pktgen.UDPLen
	ICMPLen     = pktgen.ICMPLen
)

// Values Build writes into fields that Spec does not expose.
const (
	TCPSeq    = pktgen.TCPSeq
	TCPWindow = pktgen.TCPWindow
	AHSPI     = pktgen.AHSPI
)

// OptExperiment is the option type Build fills long IPv6 option headers
// with (see pktgen.OptExperiment).
const OptExperiment = pktgen.OptExperiment

// VLAN is one 802.1Q or 802.1ad tag.
type VLAN = pktgen.VLAN

// ExtHeader is one IPv6 extension header (see pktgen.ExtHeader).
type ExtHeader = pktgen.ExtHeader

// Spec describes a frame: the fields of pktgen.FrameSpec.
type Spec pktgen.FrameSpec

// Frame is a built frame and the offsets of its layers in Bytes (see
// pktgen.Frame).
type Frame pktgen.Frame

// Build encodes s with pktgen.FrameSpec.Build, and panics where it does.
func (s Spec) Build() Frame { return Frame(pktgen.FrameSpec(s).Build()) }

// Checksum is the Internet checksum of b (RFC 1071); over a header that
// includes its own valid checksum it is 0.
func Checksum(b []byte) uint16 { return pktgen.Checksum(b) }

// Pattern returns n bytes 0, 1, 2, ... (mod 256), the payload of UDP4 and
// the other constructors.
func Pattern(n int) []byte { return pktgen.Pattern(n) }

package benchmark

import (
	"fmt"
	"slices"
	"strings"
)

// Kind is what a case measures.
type Kind string

// The kinds of measurement.
const (
	// DropTC drops every frame in a TC program on the tcx ingress hook:
	// the earliest hook that has an skb, the baseline XDP is compared to.
	DropTC Kind = "tc-drop"
	// DropGeneric drops every frame in an XDP program in generic (skb)
	// mode.
	DropGeneric Kind = "xdp-generic-drop"
	// DropNative drops every frame in an XDP program in driver mode.
	DropNative Kind = "xdp-native-drop"
	// DropFast drops every frame through fast drop (package fastdrop) in
	// driver mode, with Case.Rules prefix rules loaded; the traffic
	// matches one of them.
	DropFast Kind = "fastdrop"
	// RxDrop receives every frame on an AF_XDP socket and recycles it.
	RxDrop Kind = "rxdrop"
	// TxOnly transmits one frame over and over from an AF_XDP socket.
	TxOnly Kind = "txonly"
	// L2Fwd receives every frame on an AF_XDP socket, swaps its MAC
	// addresses and sends it back out, without a copy.
	L2Fwd Kind = "l2fwd"
)

// Kinds lists every kind, in table order.
func Kinds() []Kind {
	return []Kind{DropTC, DropGeneric, DropNative, DropFast, RxDrop, TxOnly, L2Fwd}
}

// IsAFXDP reports whether k runs an AF_XDP socket.
func (k Kind) IsAFXDP() bool { return k == RxDrop || k == TxOnly || k == L2Fwd }

func (k Kind) valid() bool { return slices.Contains(Kinds(), k) }

// Placement says where an AF_XDP application runs relative to the kernel
// work that feeds it (the softirq: NAPI of the receiving device).
type Placement string

const (
	// OneCore runs the application on the CPU that does the kernel's
	// receive work (Options.CPUs[0]). On veth that CPU also runs the
	// traffic generator: veth does its receive work in the sender's
	// context.
	OneCore Placement = "one-core"
	// TwoCores runs the application on another CPU (Options.CPUs[1]).
	TwoCores Placement = "two-cores"
)

// Tables of the standard plan, named after the published results they
// mirror.
const (
	TableDrop       = "drop"        // drop rate by hook and program
	TableNeedWakeup = "need_wakeup" // rxdrop/txonly/l2fwd x placement x need_wakeup
	TableBusyPoll   = "busy_poll"   // rxdrop on one core, busy polling off and by budget
	TableFrameSize  = "frame_size"  // rxdrop/txonly/l2fwd x frame size
	// TableXDPSock puts rxdrop and l2fwd of package xsk next to the
	// same rows run by an xdpsock binary the user names
	// (Options.XDPSock): "Go against C" on the user's own machine. It is
	// not in Tables(): it needs that binary.
	TableXDPSock = "xdpsock"
)

// App is what runs an AF_XDP row.
type App string

const (
	// AppXSK runs the row with package xsk, in this process (the
	// default, also written "").
	AppXSK App = ""
	// AppXDPSock runs the row with the xdpsock binary of
	// Options.XDPSock (the kernel's AF_XDP sample, from bpf-examples),
	// in a process of its own on the application's CPU.
	AppXDPSock App = "xdpsock"
)

// Tables lists the standard tables in order.
func Tables() []string {
	return []string{TableDrop, TableNeedWakeup, TableBusyPoll, TableFrameSize}
}

// Case is one row of a table: one configuration, measured Options.Repeat
// times.
type Case struct {
	// Table the row belongs to (one of Tables, or the caller's own name).
	Table string `json:"table"`
	Kind  Kind   `json:"kind"`
	// FrameSize is the frame's size on the wire including the 4-byte
	// FCS, as the kernel's xdpsock -s counts it: 64 sends 60-byte frames.
	FrameSize int `json:"frame_bytes"`
	// Rules is the number of prefix rules fast drop holds (DropFast).
	Rules int `json:"rules,omitempty"`
	// Placement of the application (AF_XDP kinds).
	Placement Placement `json:"placement,omitempty"`
	// NeedWakeup turns XDP_USE_NEED_WAKEUP on (AF_XDP kinds).
	NeedWakeup bool `json:"need_wakeup"`
	// BusyPollBudget > 0 turns preferred busy polling on with this budget
	// (SO_BUSY_POLL_BUDGET); RxDrop only.
	BusyPollBudget int `json:"busy_poll_budget,omitempty"`
	// App runs the row (AF_XDP kinds): package xsk, or xdpsock.
	App App `json:"app,omitempty"`
}

// Frame sizes the standard plan uses.
const (
	MinFrameSize = 64   // the smallest Ethernet frame, with its FCS
	MaxFrameSize = 9004 // the generator's largest frame (9000) plus the FCS
)

// Name is a short label for the row, e.g. "rxdrop 64B two-cores
// need_wakeup=on".
func (c Case) Name() string {
	var b strings.Builder
	b.WriteString(string(c.Kind))
	if c.Kind == DropFast {
		fmt.Fprintf(&b, " %s rules", CountName(c.Rules))
	}
	fmt.Fprintf(&b, " %dB", c.FrameSize)
	if c.Kind.IsAFXDP() {
		fmt.Fprintf(&b, " %s need_wakeup=%s", c.Placement, onOff(c.NeedWakeup))
		if c.Kind == RxDrop {
			if c.BusyPollBudget > 0 {
				fmt.Fprintf(&b, " busy_poll=%d", c.BusyPollBudget)
			}
		}
		if c.App != AppXSK {
			fmt.Fprintf(&b, " %s", c.App)
		}
	}
	return b.String()
}

// key identifies the configuration, whatever table it is listed in, so
// that a row shared by two tables is measured once.
func (c Case) key() string {
	c.Table = ""
	return fmt.Sprintf("%+v", c)
}

// Validate checks that the case makes sense.
func (c Case) Validate() error {
	switch {
	case !c.Kind.valid():
		return fmt.Errorf("benchmark: unknown kind %q", c.Kind)
	case c.FrameSize < MinFrameSize || c.FrameSize > MaxFrameSize:
		return fmt.Errorf("benchmark: %s: frame size %d: want %d to %d bytes (with the FCS)", c.Kind, c.FrameSize, MinFrameSize, MaxFrameSize)
	case c.Kind == DropFast && c.Rules < 1:
		return fmt.Errorf("benchmark: %s: want at least 1 rule", c.Kind)
	case c.Kind != DropFast && c.Rules != 0:
		return fmt.Errorf("benchmark: %s: rules are for %s only", c.Kind, DropFast)
	case c.Kind.IsAFXDP() && c.Placement != OneCore && c.Placement != TwoCores:
		return fmt.Errorf("benchmark: %s: placement %q: want %s or %s", c.Kind, c.Placement, OneCore, TwoCores)
	case !c.Kind.IsAFXDP() && (c.Placement != "" || c.NeedWakeup):
		return fmt.Errorf("benchmark: %s: placement and need_wakeup are for AF_XDP kinds", c.Kind)
	case c.BusyPollBudget < 0 || c.BusyPollBudget > 65535:
		return fmt.Errorf("benchmark: busy-poll budget %d: want 0 (off) to 65535", c.BusyPollBudget)
	case c.BusyPollBudget > 0 && c.Kind != RxDrop:
		return fmt.Errorf("benchmark: %s: busy polling is measured for %s only", c.Kind, RxDrop)
	case c.App != AppXSK && c.App != AppXDPSock:
		return fmt.Errorf("benchmark: app %q: want %q (package xsk) or %q", c.App, AppXSK, AppXDPSock)
	case c.App == AppXDPSock && c.Kind != RxDrop && c.Kind != L2Fwd:
		return fmt.Errorf("benchmark: %s: xdpsock runs %s and %s rows only", c.Kind, RxDrop, L2Fwd)
	case c.App == AppXDPSock && c.BusyPollBudget > 0:
		return fmt.Errorf("benchmark: xdpsock rows run without busy polling")
	}
	return nil
}

// PlanOptions choose the standard plan's variations.
type PlanOptions struct {
	// Tables to include (default: all of Tables()).
	Tables []string
	// Rules are the rule-set sizes of the fast-drop rows (default 10,000
	// and 1,000,000).
	Rules []int
	// Sizes are the frame sizes of the frame-size table (default 64 and
	// 1500); every other row uses the first.
	Sizes []int
	// Budgets are the busy-poll budgets (default 64, 256 and 512).
	Budgets []int
	// XDPSock adds the xdpsock table (TableXDPSock) at the end, unless
	// Tables lists it already.
	XDPSock bool
}

// Plan returns the rows of the standard tables, in the shape of the
// published results:
//
//   - drop: TC drop, generic XDP drop, native XDP drop, and fast drop
//     with each rule-set size;
//   - need_wakeup: rxdrop, txonly and l2fwd, each on one core and on two,
//     with need_wakeup off and on;
//   - busy_poll: rxdrop on one core with busy polling off and with each
//     budget (need_wakeup on);
//   - frame_size: rxdrop, txonly and l2fwd on two cores with need_wakeup
//     on, at each frame size;
//   - xdpsock (only when asked for): rxdrop and l2fwd on one core and on
//     two with need_wakeup on, each by package xsk and then by xdpsock.
//
// Rows that two tables share are measured once by Run.
func Plan(p PlanOptions) ([]Case, error) {
	if len(p.Tables) == 0 {
		p.Tables = Tables()
	}
	if len(p.Rules) == 0 {
		p.Rules = []int{10_000, 1_000_000}
	}
	if len(p.Sizes) == 0 {
		p.Sizes = []int{64, 1500}
	}
	if len(p.Budgets) == 0 {
		p.Budgets = []int{64, 256, 512}
	}
	size := p.Sizes[0]
	afxdp := []Kind{RxDrop, TxOnly, L2Fwd}
	if p.XDPSock && !slices.Contains(p.Tables, TableXDPSock) {
		p.Tables = append(slices.Clip(p.Tables), TableXDPSock)
	}
	var cs []Case
	for _, t := range p.Tables {
		switch t {
		case TableDrop:
			for _, k := range []Kind{DropTC, DropGeneric, DropNative} {
				cs = append(cs, Case{Table: t, Kind: k, FrameSize: size})
			}
			for _, n := range p.Rules {
				cs = append(cs, Case{Table: t, Kind: DropFast, FrameSize: size, Rules: n})
			}
		case TableNeedWakeup:
			for _, k := range afxdp {
				for _, pl := range []Placement{OneCore, TwoCores} {
					for _, nw := range []bool{false, true} {
						cs = append(cs, Case{Table: t, Kind: k, FrameSize: size, Placement: pl, NeedWakeup: nw})
					}
				}
			}
		case TableBusyPoll:
			for _, b := range append([]int{0}, p.Budgets...) {
				cs = append(cs, Case{Table: t, Kind: RxDrop, FrameSize: size, Placement: OneCore, NeedWakeup: true, BusyPollBudget: b})
			}
		case TableFrameSize:
			for _, k := range afxdp {
				for _, s := range p.Sizes {
					cs = append(cs, Case{Table: t, Kind: k, FrameSize: s, Placement: TwoCores, NeedWakeup: true})
				}
			}
		case TableXDPSock:
			for _, k := range []Kind{RxDrop, L2Fwd} {
				for _, pl := range []Placement{OneCore, TwoCores} {
					for _, app := range []App{AppXSK, AppXDPSock} {
						cs = append(cs, Case{Table: t, Kind: k, FrameSize: size, Placement: pl, NeedWakeup: true, App: app})
					}
				}
			}
		default:
			return nil, fmt.Errorf("benchmark: unknown table %q: want %s or %s", t, strings.Join(Tables(), ", "), TableXDPSock)
		}
	}
	for _, c := range cs {
		if err := c.Validate(); err != nil {
			return nil, err
		}
	}
	return cs, nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// CountName writes 10000 as 10k and 1000000 as 1M, as row names do.
func CountName(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

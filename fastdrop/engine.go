package fastdrop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/caps"
)

// Sentinel errors of the engine.
var (
	// ErrCapacity: a table the program was loaded with is full, or
	// Options ask for more than one program can have. The error says
	// which table, in words a user of the CLI can act on; for a Go
	// caller: rules are Options.MaxRules, "prefixes longer than /24" are
	// IPv4Blocks, "host routes" are IPv4HostBlocks, the IPv6 table is
	// IPv6Entries (CapacityFor sizes them all for a rule set).
	ErrCapacity = errors.New("capacity exceeded")
	// ErrRuleNotFound: Delete or Replace named a rule the set does not hold.
	ErrRuleNotFound = errors.New("rule not found")
	// ErrUnsupportedAction: an action where it cannot be (a malformed
	// verdict other than drop or pass).
	ErrUnsupportedAction = errors.New("action not supported there")
)

// Options size the engine's tables, which are fixed when the program is
// loaded. The zero value suits rule sets of up to 65,536 rules; use
// CapacityFor to size the tables for a rule set, with room to grow. Every
// limit holds for a whole rule set being replaced by another whole set
// (Apply), which needs room for both at once.
//
// Kernel memory, with n possible CPUs:
//   - IPv4 prefixes: 128 MiB, fixed (DIR-24-8's tbl24, 64 MiB per half),
//     plus 2 KiB per IPv4Blocks (the tbl8 pool both halves share) and
//     128 bytes per IPv4HostBlocks (the sparse pool);
//   - IPv6 prefixes: 64 bytes per IPv6Entries (32 per half);
//   - rules: 2 × (64 + 16n) bytes per MaxRules (a record and per-CPU
//     counters per rule, for the old and the new set);
//   - compound rules: 13.5 MiB, fixed.
//
// For example 1,000,000 IPv4 prefixes of which 200,000 are longer than /24
// (IPv4Blocks 200,000) take 128 + 400 MiB; 1,000,000 IPv6 prefixes
// (IPv6Entries 2,097,152) 128 MiB; 2,000,000 rules on 2 CPUs 384 MiB.
type Options struct {
	// MaxRules is how many rules (prefix and compound) a rule set may
	// have. Default 65,536; at most the constant MaxRules.
	MaxRules int
	// IPv4Blocks is how many /24 blocks may hold IPv4 prefixes longer
	// than /24 other than a few host routes (each needs a 256-entry tbl8
	// group). Default 4,096.
	IPv4Blocks int
	// IPv4HostBlocks is how many /24 blocks may hold host routes (/32s)
	// and no other prefix longer than /24, at most 11 of them (each needs
	// a 64-byte sparse group). A blocklist of n random /32s needs about n
	// here and none in IPv4Blocks. Default 65,536.
	IPv4HostBlocks int
	// IPv6Entries is the size of the IPv6 prefix hash table (per half),
	// rounded up to a power of two. IPv6 prefixes and their markers (at
	// most one per prefix per level of the search, usually far fewer) may
	// fill three quarters of it. Default 131,072; at most MaxIPv6Entries.
	IPv6Entries int
	// LimitSources is the size of the table of per-source buckets that
	// limit rules with per src share, rounded up to a power of two: sets
	// of 8, a new source taking the bucket of its set that would be full
	// soonest, so a flood of spoofed sources cannot grow it. Default
	// 262,144, 4 MiB (16 bytes a bucket): a quarter full with 65,536
	// sources, where almost none of them lose their buckets to each
	// other (docs/RULES.md).
	LimitSources int
	// Bans is how many sources may be banned at once (least recently
	// used evicted). Default 16,384, about 2 MiB.
	Bans int

	// DstPrefixes gives the program a destination prefix table, for the
	// prefix rules "ACTION dst PREFIX", built as the source one: 128 MiB
	// (a tbl24 per half) plus DstIPv4Blocks and DstIPv4HostBlocks as
	// IPv4Blocks and IPv4HostBlocks are for the source table (defaults
	// 256 and 16,384), and an IPv6 table of IPv6Entries (which both
	// tables' IPv6 prefixes must fit). Without it a rule set with such
	// rules is refused, wrapping ErrCapacity (xdpdrop drop and the agent
	// then load the program again with it). CapacityFor sets it for a
	// rule set that has them.
	DstPrefixes                      bool
	DstIPv4Blocks, DstIPv4HostBlocks int

	// SocketMaps, if set, are the socket maps of another engine, by the
	// names Maps gives them (fd_xsks and fd_xsk_counters): the new engine
	// uses them instead of its own, so the AF_XDP sockets registered with
	// the other one stay registered (a program loaded again with bigger
	// tables to replace an attached one).
	SocketMaps map[string]*ebpf.Map

	// testClock makes the program's clock the test clock (test runs only:
	// Engine.setTestClock).
	testClock bool
	// testTicks (with testClock): the policers see the test clock in
	// steps of a jiffy, as they see the real one.
	testTicks bool
	// trace makes the program prepend a struct fd_trace_rec to each frame
	// (test runs only).
	trace bool
	// want is what CapacityFor sized the tables for, for New's errors.
	want struct {
		rules, v6 int
		set       bool
	}
}

// The hard limits of one program. It indexes each CPU's counters and the
// IPv6 table with a variable offset into one map value, which the kernel's
// verifier allows up to BPF_MAX_VAR_OFF (512 MiB) only: above it the
// program is refused ("unbounded memory access"). That is below the
// INT_MAX bytes a map value may have, and FD_VAL_SLOT_MASK's slots.
const (
	maxVarOff = 1 << 29
	// MaxRules is the largest number of rules (prefix and compound) a rule
	// set may have, and the largest Options.MaxRules: a counter slot for
	// each rule of two whole sets (a change holds the old and the new one).
	MaxRules = (maxVarOff/counterSize - int(firstRule)) / 2
	// MaxIPv6Entries is the largest Options.IPv6Entries. Prefixes and
	// their markers may fill three quarters of it: CapacityFor counts
	// 1.8 entries per IPv6 prefix, so about 9.3 million IPv6 prefixes fit.
	MaxIPv6Entries = maxVarOff / v6EntSize
)

// v6EntriesPerPrefix is CapacityFor's estimate of the IPv6 table entries a
// prefix needs: itself and its markers, at a load of 3/4.
const v6EntriesPerPrefix = 1.8

// capacityAdvice says what to do with a rule set that does not fit.
const capacityAdvice = "aggregate adjacent prefixes into shorter ones, and leave out prefixes that a shorter one with the same action already covers"

// reloadAdvice says what to do when a table the program was loaded with
// is full (tables are sized at load; xdpdrop drop and rules reload by
// themselves).
const reloadAdvice = "load the program again with bigger tables"

// Every slot of MaxRules fits a val's slot bits too, or this does not
// compile.
var _ = [1]struct{}{}[(2*MaxRules+int(firstRule)-1)/int(valSlotMask+1)]

// CapacityFor returns Options that hold rs and grow times as many rules of
// each kind again (grow >= 1; 2 doubles), or as much room to grow as the
// limits (MaxRules, MaxIPv6Entries) leave. For a set beyond them, New
// refuses the Options with an error that says so, before loading anything.
func CapacityFor(rs *RuleSet, grow float64) Options {
	n, src, dst := setCounts(rs)
	grow = max(grow, 1)
	// One IPv6 table size for both tables: the larger one's.
	o := capacityFor(n, max(src.v6, dst.v6), src.dense, src.sparse, grow)
	if dst.n > 0 {
		o.DstPrefixes = true
		o.DstIPv4Blocks = int(float64(dst.dense)*grow) + 256
		o.DstIPv4HostBlocks = int(float64(dst.sparse)*grow) + 4096
	}
	return o
}

// prefixCounts are what sizes one prefix table: its rules, its IPv6
// prefixes, and the /24s whose IPv4 prefixes longer than /24 need a tbl8
// group (dense) or a sparse group.
type prefixCounts struct{ n, v6, dense, sparse int }

// setCounts counts what sizes the tables for rs: its rules, and the
// source and the destination prefix tables' prefixCounts.
func setCounts(rs *RuleSet) (n int, src, dst prefixCounts) {
	// Per table and /24 with longer prefixes: its host routes, or -1 if
	// it holds a /25-/31 (then it needs a tbl8 group, as it does with too
	// many hosts).
	blocks := [2]map[uint32]int{make(map[uint32]int), make(map[uint32]int)}
	counts := [2]*prefixCounts{&src, &dst}
	for i := range rs.Rules {
		r := &rs.Rules[i]
		n++
		if !r.IsPrefixOnly() {
			continue
		}
		k := r.PrefixKey()
		t := 0
		if k.Dst {
			t = 1
		}
		counts[t].n++
		if k.Prefix.Addr().Is4() {
			if k.Prefix.Bits() > 24 {
				p := v4PrefixOf(k.Prefix, 0)
				if h := blocks[t][p.addr>>8]; h >= 0 && p.bits == 32 {
					blocks[t][p.addr>>8] = h + 1
				} else {
					blocks[t][p.addr>>8] = -1
				}
			}
		} else {
			counts[t].v6++
		}
	}
	for t := range blocks {
		for _, h := range blocks[t] {
			if h < 0 || h > sparseMax {
				counts[t].dense++
			} else {
				counts[t].sparse++
			}
		}
	}
	return n, src, dst
}

// capacityFor is CapacityFor for a set of n rules, v6 of them IPv6
// prefixes, with IPv4 prefixes longer than /24 in dense and sparse /24s.
func capacityFor(n, v6, dense, sparse int, grow float64) Options {
	o := Options{
		MaxRules:       int(float64(n)*grow) + 1024,
		IPv4Blocks:     int(float64(dense)*grow) + 256,
		IPv4HostBlocks: int(float64(sparse)*grow) + 4096,
		IPv6Entries:    int(v6EntriesPerPrefix*float64(v6)*grow) + 1024,
	}
	o.want.rules, o.want.v6, o.want.set = n, v6, true
	o = o.withDefaults()
	// Less room to grow rather than none at all; a set beyond the limits
	// keeps its own size, which New refuses.
	if o.MaxRules > MaxRules {
		o.MaxRules = max(MaxRules, n)
	}
	if o.IPv6Entries > MaxIPv6Entries && int(v6EntriesPerPrefix*float64(v6))+1024 <= MaxIPv6Entries {
		o.IPv6Entries = MaxIPv6Entries
	}
	return o
}

// maxIPv6Prefixes is about how many IPv6 prefix rules fit (CapacityFor's
// estimate of their entries at MaxIPv6Entries).
func maxIPv6Prefixes() int {
	per := v6EntriesPerPrefix // a variable: the quotient is not an integer
	return int(float64(MaxIPv6Entries-1024) / per)
}

// check refuses Options beyond the program's limits.
func (o Options) check() error {
	if o.MaxRules > MaxRules {
		if o.want.set {
			return fmt.Errorf("fastdrop: %d rules: %w: one fast-drop program holds at most %d rules; %s", o.want.rules, ErrCapacity, MaxRules, capacityAdvice)
		}
		return fmt.Errorf("fastdrop: room for %d rules asked: %w: one fast-drop program holds at most %d", o.MaxRules, ErrCapacity, MaxRules)
	}
	if o.IPv6Entries > MaxIPv6Entries {
		if o.want.set {
			return fmt.Errorf("fastdrop: %d IPv6 prefix rules: %w: one fast-drop program holds about %d (its IPv6 table has %d entries, for the prefixes and their search markers); %s",
				o.want.v6, ErrCapacity, maxIPv6Prefixes(), MaxIPv6Entries, capacityAdvice)
		}
		return fmt.Errorf("fastdrop: an IPv6 table of %d entries asked: %w: one fast-drop program has at most %d", o.IPv6Entries, ErrCapacity, MaxIPv6Entries)
	}
	// The program hashes a source to at most 2^24 sets of 4.
	if o.LimitSources > maxLimitSources {
		return fmt.Errorf("fastdrop: a table of %d per-source buckets asked: %w: one fast-drop program has at most %d", o.LimitSources, ErrCapacity, maxLimitSources)
	}
	return nil
}

// maxLimitSources is the most per-source buckets (Options.LimitSources).
const maxLimitSources = 1 << 26

func (o Options) withDefaults() Options {
	if o.MaxRules <= 0 {
		o.MaxRules = 1 << 16
	}
	if o.IPv4Blocks <= 0 {
		o.IPv4Blocks = 4096
	}
	if o.IPv4HostBlocks <= 0 {
		o.IPv4HostBlocks = 1 << 16
	}
	if o.IPv6Entries <= 0 {
		o.IPv6Entries = 1 << 17
	}
	if o.LimitSources <= 0 {
		o.LimitSources = 1 << 18
	}
	if o.Bans <= 0 {
		o.Bans = 1 << 14
	}
	if o.DstPrefixes {
		if o.DstIPv4Blocks <= 0 {
			o.DstIPv4Blocks = 256
		}
		if o.DstIPv4HostBlocks <= 0 {
			o.DstIPv4HostBlocks = 1 << 14
		}
	}
	e := 1024
	for e < o.IPv6Entries {
		e *= 2
	}
	o.IPv6Entries = e
	return o
}

// The maps a later process needs, by the names they are pinned under.
var mapNames = []string{
	gen.FastdropMapFdMain,
	gen.FastdropMapFdV4Tbl8, gen.FastdropMapFdV4Sparse, gen.FastdropMapFdV6Tab,
	gen.FastdropMapFdD4Tbl24, gen.FastdropMapFdD4Tbl8, gen.FastdropMapFdD4Sparse,
	gen.FastdropMapFdCounters,
	gen.FastdropMapFdRules, gen.FastdropMapFdRuleLists, gen.FastdropMapFdRuleText,
	gen.FastdropMapFdXsks, gen.FastdropMapFdXskCounters,
	gen.FastdropMapFdPolicers, gen.FastdropMapFdPolCnt, gen.FastdropMapFdPolSrc, gen.FastdropMapFdBans,
	// Captures (package capture): per-CPU counts and each capture's ring.
	gen.FastdropMapFdCapCpu, gen.FastdropMapFdCapRings, gen.FastdropMapFdCapSamples,
}

// socketMaps are the maps of the AF_XDP sockets (sockets.go), which a
// program loaded again with bigger tables takes over (Options.SocketMaps).
var socketMaps = []string{gen.FastdropMapFdXsks, gen.FastdropMapFdXskCounters}

// Engine owns the drop program and its maps: it compiles rule sets into
// the maps and reads the counters back. Its methods are safe for
// concurrent use.
//
// Every table exists in two halves. The program reads one index, the
// active half, once per frame and then only that half. A change is
// written to the other half, the index is flipped, the engine waits for
// every program run that may still use the old half to end (an RCU grace
// period), and then writes the same change to the old half, so both halves
// are equal again. A frame is thus judged by the old rule set or the new
// one, never by parts of both.
type Engine struct {
	mu sync.Mutex

	prog *ebpf.Program
	maps map[string]*ebpf.Map
	mem  struct {
		ctl, cls, tbl24                   *mapMem // parts of fd_main
		tbl8, sparse, v6, counters, rules *mapMem
		pcnt                              *mapMem     // fd_pol_cnt
		active                            *activeWord // state.active in fd_main, stored atomically
	}
	syncOuter, syncInner *ebpf.Map
	lockDir              *os.File

	ncpu, nslots, groups, sparse, v6cap int

	// The rule set in force, with each rule's key and counter slot.
	rules   []Rule
	slots   []uint32
	orderOf []uint32 // by slot: the order its record holds
	genOf   []uint32 // by slot: the generation its rule came with
	// sideSlots are the slots with an entry in each side map (sideLists:
	// the numeric fields that rule records cannot hold, fields_num.go;
	// sideText: the text as written); they mirror the maps, not the rule
	// set.
	sideSlots [sideMaps]map[uint32]bool
	policy    Action
	malformed Action
	// prefixSlot finds a prefix rule's slot by key; nil until needed
	// after a whole load (a load does not need it), see prefixIndex.
	prefixSlot *prefixIndex
	textSlot   map[string]uint32 // compound rules, by compoundKeys
	free       []uint32          // free slots below nextSlot
	nextSlot   uint32
	ncompound  int
	maxOrder   uint32 // the largest order a record holds
	nsampled   int    // rules with a sample modifier

	v4      *v4Table
	v6      *v6Table
	v6dirty bool // v6 was rebuilt: write it whole
	cls     *classifier
	// dst: the destination prefix table; nil if the program was loaded
	// without one (Options.DstPrefixes).
	dst *dstTables

	active     uint32
	generation uint64
	// retireHook, if set (tests), sees the final counts of each removed
	// rule's slot.
	retireHook func(slot uint32, c Counter)
	// publishHook, if set (tests), runs in the middle of a change: the
	// records of the new rules written, the flip not made yet.
	publishHook func()
	// locked: a change holds the pin directory's lock (change). Only
	// then may loadLocked free what a change that did not finish left:
	// without the lock, that may be another process's change going on.
	locked bool
	// unfreed: loadLocked found such records without the lock and left
	// them; the next change reads the rule set again, under the lock.
	unfreed bool
	// fullWrite: the halves may differ from the mirrors (after Open, or
	// after a failed change): the next commit writes every table whole.
	fullWrite bool
	// tablesStale: the mirrors (v4, v6, cls) do not hold e.rules yet.
	// Reading the rule set back (Open, another process's change) only
	// reads the records; the tables, which cost seconds for millions of
	// rules, are rebuilt by the first change that needs them.
	tablesStale bool
	// loaded: e.rules holds the rule set of generation e.generation.
	loaded bool
	// pol: the limit rules' police entries.
	pol       policeState
	testClock bool
}

// New loads the drop program and creates its maps, with an empty rule set
// (policy pass). It does not attach the program.
func New(opts Options) (*Engine, error) {
	opts = opts.withDefaults()
	if err := opts.check(); err != nil {
		return nil, err
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("fastdrop: count possible CPUs: %w", err)
	}
	spec, err := gen.LoadFastdrop()
	if err != nil {
		return nil, fmt.Errorf("fastdrop: %w", err)
	}
	// Room for two whole rule sets: a change gives slots to the rules it
	// adds while those it removes still have theirs.
	// Within the limits (opts.check): a slot number fits a val, and a
	// CPU's counters one map value the program can index.
	nslots := 2*opts.MaxRules + int(firstRule)
	spec.Maps[gen.FastdropMapFdV4Tbl8].MaxEntries = uint32(2 * opts.IPv4Blocks)
	spec.Maps[gen.FastdropMapFdV4Sparse].MaxEntries = uint32(2 * opts.IPv4HostBlocks)
	spec.Maps[gen.FastdropMapFdV6Tab].ValueSize = uint32(opts.IPv6Entries * v6EntSize)
	if err := spec.Variables[gen.FastdropVarFdV6Cap].Set(uint32(opts.IPv6Entries)); err != nil {
		return nil, fmt.Errorf("fastdrop: set %s: %w", gen.FastdropVarFdV6Cap, err)
	}
	if err := sizeDst(spec, opts); err != nil {
		return nil, err
	}
	spec.Maps[gen.FastdropMapFdCounters].MaxEntries = uint32(ncpu)
	spec.Maps[gen.FastdropMapFdCounters].ValueSize = uint32(nslots * counterSize)
	spec.Maps[gen.FastdropMapFdRules].MaxEntries = uint32(nslots)
	spec.Maps[gen.FastdropMapFdPolCnt].MaxEntries = uint32(ncpu)
	sets := 1
	for sets*srcWays < opts.LimitSources {
		sets *= 2
	}
	spec.Maps[gen.FastdropMapFdPolSrc].MaxEntries = uint32(sets)
	if err := spec.Variables[gen.FastdropVarFdSrcSetsMask].Set(uint32(sets - 1)); err != nil {
		return nil, fmt.Errorf("fastdrop: set %s: %w", gen.FastdropVarFdSrcSetsMask, err)
	}
	spec.Maps[gen.FastdropMapFdBans].MaxEntries = uint32(opts.Bans)
	// The policers' clock counts jiffies (bpf/fastdrop.h, fd_pol_now):
	// CLOCK_MONOTONIC_COARSE's resolution is a jiffy's length.
	var res unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_MONOTONIC_COARSE, &res); err != nil {
		return nil, fmt.Errorf("fastdrop: read the coarse clock's resolution: %w", err)
	}
	if err := spec.Variables[gen.FastdropVarFdTickNs].Set(uint64(res.Nano())); err != nil {
		return nil, fmt.Errorf("fastdrop: set %s: %w", gen.FastdropVarFdTickNs, err)
	}
	if opts.testClock {
		mode := uint32(1)
		if opts.testTicks {
			mode = 2
		}
		if err := spec.Variables[gen.FastdropVarFdTestClock].Set(mode); err != nil {
			return nil, fmt.Errorf("fastdrop: set %s: %w", gen.FastdropVarFdTestClock, err)
		}
	}
	spec.Maps[gen.FastdropMapFdCapCpu].MaxEntries = uint32(ncpu)
	if err := spec.Variables[gen.FastdropVarFdCounterSlots].Set(uint32(nslots)); err != nil {
		return nil, fmt.Errorf("fastdrop: set %s: %w", gen.FastdropVarFdCounterSlots, err)
	}
	// One of the two programs: with the trace record (test runs) or not.
	progName := gen.FastdropProgXdpFastdrop
	if opts.trace {
		progName = gen.FastdropProgXdpFastdropTrace
		delete(spec.Programs, gen.FastdropProgXdpFastdrop)
	} else {
		delete(spec.Programs, gen.FastdropProgXdpFastdropTrace)
	}
	var reuse map[string]*ebpf.Map
	for _, name := range socketMaps {
		if m := opts.SocketMaps[name]; m != nil {
			if reuse == nil {
				reuse = make(map[string]*ebpf.Map)
			}
			reuse[name] = m
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: reuse})
	if err != nil {
		// CAP_PERFMON too: without it the verifier refuses the
		// program's pointer arithmetic (EACCES).
		return nil, fmt.Errorf("fastdrop: load program: %w%s", err, caps.Suffix(err, caps.Of(caps.BPF, caps.NetAdmin, caps.Perfmon)))
	}
	e := &Engine{prog: coll.Programs[progName], maps: make(map[string]*ebpf.Map), testClock: opts.testClock}
	delete(coll.Programs, progName)
	for _, name := range mapNames {
		// (Replacement maps are the collection's clones: ours to close.)
		e.maps[name] = coll.Maps[name]
		delete(coll.Maps, name)
	}
	coll.Close() // what is left: the .rodata map, which the program holds
	if err := e.setup(); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	// The maps start zeroed, as do the mirrors: only the configurations
	// and the state need writing.
	e.resetRules()
	if err := e.resetTables(); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	e.generation, e.loaded = 1, true
	// The stamp that a later Open checks (see checkLayout).
	if err := writeStamp(e.mem.ctl, currentStamp()); err != nil {
		return nil, errors.Join(fmt.Errorf("fastdrop: %w", err), e.Close())
	}
	for h := range uint32(2) {
		if err := e.writeConf(h, e.confFor(h)); err != nil {
			return nil, errors.Join(fmt.Errorf("fastdrop: %w", err), e.Close())
		}
	}
	if err := e.writeState(gen.FastdropFdState{InSync: 1, Generation: e.generation}); err != nil {
		return nil, errors.Join(fmt.Errorf("fastdrop: %w", err), e.Close())
	}
	return e, nil
}

// Open reopens an engine whose maps (see Maps) another process pinned in
// pinDir, with its rule set and counters, for example to list or change
// rules from a new process. The program is reopened too if it is pinned
// there as xdp_fastdrop. Changes made through Open lock pinDir against
// other processes doing the same.
//
// Open itself only opens the maps: the rule records are read by the first
// call that needs the rule set (RuleSet, Counters, a change), and the
// prefix and compound tables are rebuilt only by the first change. To
// count the rules without reading them, use RuleCount.
func Open(pinDir string) (*Engine, error) {
	e := &Engine{maps: make(map[string]*ebpf.Map)}
	for _, name := range mapNames {
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), nil)
		if err != nil {
			// A map an older layout did not have: say that, not which.
			if main := e.maps[gen.FastdropMapFdMain]; main != nil && errors.Is(err, os.ErrNotExist) {
				if _, serr := checkStamp(pinDir, main); serr != nil {
					return nil, errors.Join(serr, e.Close())
				}
			}
			return nil, errors.Join(fmt.Errorf("fastdrop: open pinned map %s in %s: %w", name, pinDir, err), e.Close())
		}
		e.maps[name] = m
	}
	if p, err := ebpf.LoadPinnedProgram(filepath.Join(pinDir, gen.FastdropProgXdpFastdrop), nil); err == nil {
		e.prog = p
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, errors.Join(fmt.Errorf("fastdrop: open pinned program in %s: %w", pinDir, err), e.Close())
	}
	d, err := os.Open(pinDir)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("fastdrop: open %s: %w", pinDir, err), e.Close())
	}
	e.lockDir = d
	// Before anything reads them: pins of another layout would be misread.
	if err := checkLayout(pinDir, e.maps); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	if err := e.setup(); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	// Fail early, as before, if the maps hold no readable state.
	if _, err := e.readState(); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	return e, nil
}

// RuleCount returns the number of rules in force in the engine pinned in
// pinDir, from the active half's configuration alone: it reads no rule
// record and builds nothing, so it costs the same for any number of rules.
func RuleCount(pinDir string) (int, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, gen.FastdropMapFdMain), nil)
	if err != nil {
		return 0, fmt.Errorf("fastdrop: open pinned map %s in %s: %w", gen.FastdropMapFdMain, pinDir, err)
	}
	defer m.Close()
	if _, err := checkStamp(pinDir, m); err != nil {
		return 0, err
	}
	ctl, err := newMapMem(m, 0, 64<<10, 2)
	if err != nil {
		return 0, fmt.Errorf("fastdrop: %w", err)
	}
	defer ctl.release()
	st, err := readState(ctl)
	if err != nil {
		return 0, err
	}
	conf, err := readConf(ctl, st.Active&1)
	if err != nil {
		return 0, fmt.Errorf("fastdrop: %w", err)
	}
	return int(conf.Ncompound) + int(conf.V4Count) + int(conf.V6Count) + int(conf.D4Count) + int(conf.D6Count), nil
}

// setup derives the sizes from the maps and maps their memory.
func (e *Engine) setup() error {
	e.nslots = int(e.maps[gen.FastdropMapFdRules].MaxEntries())
	e.ncpu = int(e.maps[gen.FastdropMapFdCounters].MaxEntries())
	e.groups = int(e.maps[gen.FastdropMapFdV4Tbl8].MaxEntries()) // the shared pool
	e.sparse = int(e.maps[gen.FastdropMapFdV4Sparse].MaxEntries())
	e.v6cap = int(e.maps[gen.FastdropMapFdV6Tab].ValueSize()) / v6EntSize
	// The maps' memory is mapped a window at a time (see mapMem). Offsets
	// in cls and tbl24 start with h*halfSize for half h. A change to the
	// counters of a slot touches each CPU's row and the retired slots at
	// its start: a window for each.
	for _, m := range []struct {
		name         string
		mem          **mapMem
		base         int64
		window, nwin int
	}{
		{gen.FastdropMapFdMain, &e.mem.ctl, 0, 64 << 10, 4},
		{gen.FastdropMapFdMain, &e.mem.cls, mainHalf + halfCls, 1 << 20, 4},
		{gen.FastdropMapFdMain, &e.mem.tbl24, mainHalf + halfTbl24, 1 << 20, 4},
		{gen.FastdropMapFdV4Tbl8, &e.mem.tbl8, 0, 1 << 20, 4},
		{gen.FastdropMapFdV4Sparse, &e.mem.sparse, 0, 1 << 20, 4},
		{gen.FastdropMapFdV6Tab, &e.mem.v6, 0, 1 << 20, 4},
		{gen.FastdropMapFdCounters, &e.mem.counters, 0, 64 << 10, 2*e.ncpu + 2},
		{gen.FastdropMapFdRules, &e.mem.rules, 0, 1 << 20, 4},
		{gen.FastdropMapFdPolCnt, &e.mem.pcnt, 0, 64 << 10, e.ncpu + 1},
	} {
		mm, err := newMapMem(e.maps[m.name], m.base, m.window, m.nwin)
		if err != nil {
			return fmt.Errorf("fastdrop: %w", err)
		}
		*m.mem = mm
	}
	if err := e.setupDst(); err != nil {
		return fmt.Errorf("fastdrop: %w", err)
	}
	var err error
	if e.mem.active, err = mapActiveWord(e.maps[gen.FastdropMapFdMain]); err != nil {
		return fmt.Errorf("fastdrop: %w", err)
	}
	return nil
}

// makeSyncMaps makes the maps waitPrograms uses, the first time a change
// needs them: creating a map needs CAP_BPF, and an engine that only reads
// (counters, the rule set) needs no capability at all.
func (e *Engine) makeSyncMaps() error {
	if e.syncOuter != nil {
		return nil
	}
	// Updating a map-in-map waits for an RCU grace period (the kernel's
	// maybe_wait_bpf_programs), that is until every program run that
	// started before has ended. That is the wait between flipping the
	// active half and writing the old one.
	inner := &ebpf.MapSpec{Name: "fd_sync_inner", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
	var err error
	if e.syncInner, err = ebpf.NewMap(inner); err != nil {
		return fmt.Errorf("fastdrop: create map: %w%s", err, caps.Suffix(err, caps.Of(caps.BPF)))
	}
	if e.syncOuter, err = ebpf.NewMap(&ebpf.MapSpec{Name: "fd_sync", Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 1, InnerMap: inner}); err != nil {
		return fmt.Errorf("fastdrop: create map: %w%s", err, caps.Suffix(err, caps.Of(caps.BPF)))
	}
	return nil
}

// resetRules empties the engine's view of the rule set (not the tables).
func (e *Engine) resetRules() {
	e.rules, e.slots = nil, nil
	if len(e.orderOf) == e.nslots {
		clear(e.orderOf)
		clear(e.genOf)
	} else {
		e.orderOf = make([]uint32, e.nslots)
		e.genOf = make([]uint32, e.nslots)
	}
	e.policy, e.malformed = ActionPass, ActionPass
	e.prefixSlot = nil
	e.textSlot = make(map[string]uint32)
	e.free = nil
	e.nextSlot = firstRule
	e.ncompound, e.maxOrder = 0, 0
	e.pol.reset()
}

// resetTables makes empty table mirrors.
func (e *Engine) resetTables() error {
	if err := e.closeTables(); err != nil {
		return err
	}
	var err error
	if e.v4, err = newV4Table(e.groups, e.sparse, e.nslots, e.mem.tbl8, e.mem.sparse); err != nil {
		return fmt.Errorf("fastdrop: %w", err)
	}
	if e.v6, err = newV6Table(e.v6cap); err != nil {
		return fmt.Errorf("fastdrop: %w", err)
	}
	if err := e.dst.reset(e.nslots); err != nil {
		return fmt.Errorf("fastdrop: %w", err)
	}
	e.cls, _ = compileCompound(nil)
	return nil
}

func (e *Engine) closeTables() error {
	var errs []error
	if e.v4 != nil {
		errs = append(errs, e.v4.close())
		e.v4 = nil
	}
	if e.v6 != nil {
		errs = append(errs, e.v6.close())
		e.v6 = nil
	}
	errs = append(errs, e.dst.close())
	return errors.Join(errs...)
}

// Program returns the drop program, to attach to an interface (nil if
// Open found none pinned).
func (e *Engine) Program() *ebpf.Program { return e.prog }

// Maps returns the maps to pin, by name, so that Open can find them.
func (e *Engine) Maps() map[string]*ebpf.Map {
	m := make(map[string]*ebpf.Map, len(mapNames))
	for _, name := range mapNames {
		m[name] = e.maps[name]
	}
	return m
}

// Close releases the program and maps (the kernel keeps what is pinned or
// attached), and the engine's copies of the tables. Closing it again does
// nothing.
func (e *Engine) Close() error {
	var errs []error
	if e.prog != nil {
		errs = append(errs, e.prog.Close())
	}
	for _, m := range e.maps {
		errs = append(errs, m.Close())
	}
	for _, m := range []*ebpf.Map{e.syncOuter, e.syncInner} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	if e.lockDir != nil {
		errs = append(errs, e.lockDir.Close())
		e.lockDir = nil
	}
	e.rules, e.slots, e.prefixSlot, e.textSlot = nil, nil, nil, nil
	for _, m := range []*mapMem{e.mem.ctl, e.mem.cls, e.mem.tbl24, e.mem.tbl8, e.mem.sparse, e.mem.v6, e.mem.counters, e.mem.rules, e.mem.pcnt} {
		errs = append(errs, m.release())
	}
	errs = append(errs, e.mem.active.close())
	errs = append(errs, e.closeTables())
	errs = append(errs, e.dst.release())
	return errors.Join(errs...)
}

// RuleSet returns a copy of the rule set in force.
func (e *Engine) RuleSet() (*RuleSet, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.refreshLocked(); err != nil {
		return nil, err
	}
	return &RuleSet{Rules: slices.Clone(e.rules), Policy: e.policy, Malformed: e.malformed}, nil
}

// Policy returns the verdicts of the rule set in force for frames that
// no rule matches and for malformed frames (RuleSet's EffectivePolicy and
// EffectiveMalformed), without copying the rules.
func (e *Engine) Policy() (policy, malformed Action, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.refreshLocked(); err != nil {
		return 0, 0, err
	}
	return e.policy, e.malformed, nil
}

// Apply replaces the whole rule set, atomically: every frame is judged by
// the old set or by rs. Rules that stay (same text) keep their counters.
func (e *Engine) Apply(rs *RuleSet) error {
	if err := e.fitsWhole(rs); err != nil {
		return err
	}
	return e.change(func() (*plan, error) {
		return e.planApply(rs.Rules, rs.EffectivePolicy(), rs.EffectiveMalformed()), nil
	})
}

// ApplyOrigin replaces the rules of one origin (see origin.go) with
// rs.Rules, atomically, and leaves the rules of every other origin as they
// are; rules that stay keep their counters. rs's rules take origin as
// their Origin (set in rs.Rules itself). rs.Policy and rs.Malformed, where not zero, become the
// program's policy and malformed verdict; zero leaves them as they are.
// An empty rs removes the origin's rules.
//
// The change is made as Add and Delete make theirs: the origin's rules in
// force are matched with rs's (same text, or same prefix, action and
// sample for prefix rules), and only the rules added and removed are
// checked, compiled and written, so a change of a few rules costs about
// what those rules cost, not what the other origins' million do. Only
// when most of the rule set changes is it put in force as a whole set.
func (e *Engine) ApplyOrigin(origin string, rs *RuleSet) error {
	if err := ValidateOrigin(origin); err != nil {
		return fmt.Errorf("fastdrop: %w", err)
	}
	for i := range rs.Rules {
		rs.Rules[i].Origin = origin
	}
	return e.change(func() (*plan, error) {
		policy, malformed := actionOr(rs.Policy, e.policy), actionOr(rs.Malformed, e.malformed)
		if p := e.planOrigin(origin, rs.Rules, policy, malformed); p != nil {
			return p, nil
		}
		others := 0
		for i := range e.rules {
			if e.rules[i].Origin != origin {
				others++
			}
		}
		var rules []Rule
		if others == 0 {
			// Nothing to keep: the plan takes rs's slice, as Apply does,
			// instead of a copy (a million rules are 160 MB each time).
			rules = rs.Rules
		} else {
			rules = make([]Rule, 0, others+len(rs.Rules))
			for i := range e.rules {
				if e.rules[i].Origin != origin {
					rules = append(rules, e.rules[i])
				}
			}
			rules = append(rules, rs.Rules...)
		}
		return e.planApply(rules, policy, malformed), nil
	})
}

// originKey is what matches a rule of an origin in force with one of its
// new rules (as sameRule does): a prefix rule's prefix, action and
// sample modifier; a compound rule's text.
type originKey struct {
	pfx    PrefixKey
	action Action
	sample uint32
	text   string
}

func originKeyOf(r *Rule) originKey {
	if r.IsPrefixOnly() {
		return originKey{pfx: r.PrefixKey(), action: r.Action, sample: r.Sample}
	}
	return originKey{text: r.Written()}
}

// planOrigin is ApplyOrigin's change as a plan of added and removed
// rules: the origin's rules in force that rules has too keep their slots
// and places, the others are removed, rules' new ones are appended, and
// the origin's compound rules take rules' order among the places its
// compound rules hold (the compound rules of different origins are
// ordered by origin, so no other origin's rule changes rank). It returns
// nil when most of the rule set changes: a whole new set is cheaper then.
func (e *Engine) planOrigin(origin string, rules []Rule, policy, malformed Action) *plan {
	var mine []int // the origin's rules in force, by index
	for i := range e.rules {
		if e.rules[i].Origin == origin {
			mine = append(mine, i)
		}
	}
	// The origin's rules in force by key, in order (a text may be there
	// twice).
	byKey := make(map[originKey][]int, len(mine))
	for _, i := range mine {
		k := originKeyOf(&e.rules[i])
		byKey[k] = append(byKey[k], i)
	}
	// inForce: rules index -> e.rules index of the rule kept for it, or
	// -1; inForceOf the other way round (by e.rules index, for mine).
	inForce := make([]int, len(rules))
	inForceOf := make(map[int]int, len(mine))
	for _, i := range mine {
		inForceOf[i] = -1
	}
	var newRules []int // indices into rules
	kept := 0
	for j := range rules {
		k := originKeyOf(&rules[j])
		if q := byKey[k]; len(q) > 0 {
			inForce[j], inForceOf[q[0]] = q[0], j
			byKey[k] = q[1:]
			kept++
		} else {
			inForce[j] = -1
			newRules = append(newRules, j)
		}
	}
	gone := len(mine) - kept
	if changes := gone + len(newRules); changes > 64 && changes > (len(e.rules)+len(rules))/2 {
		return nil
	}
	// moved: the origin's compound rules change order (a kept one goes
	// before another kept one it came after, or after a new one). Else
	// the kept ones stay where they are and the new ones come last, as
	// with Add.
	moved, seenNew, last := false, false, -1
	var seq []int // rules' compound rules, by index into rules
	for j := range rules {
		if rules[j].IsPrefixOnly() {
			continue
		}
		seq = append(seq, j)
		switch i := inForce[j]; {
		case i < 0:
			seenNew = true
		case seenNew || i < last:
			moved = true
		default:
			last = i
		}
	}
	p := &plan{policy: policy, malformed: malformed, addOrder: make(map[int]uint32)}
	n := len(e.rules) - gone + len(newRules)
	copied := gone > 0 || moved
	if copied {
		room := n + max(16, n/4) // so that the next Adds need no copy
		p.rules, p.slots = make([]Rule, 0, room), make([]uint32, 0, room)
	} else {
		// Appending leaves e.rules and e.slots as they are (they are
		// shorter), as Add does: no copy of the other origins' rules.
		p.rules, p.slots = e.rules, e.slots
	}
	// Kept rules keep the rule in force (its record's Line, too). The
	// other origins' rules are copied a run at a time, if at all.
	where := make([]int, len(rules)) // rules index -> p.rules index
	var places []int                 // p.rules indices of the origin's compound rules
	from := 0                        // e.rules[from:] not copied yet
	for _, i := range mine {
		if copied {
			p.rules = append(p.rules, e.rules[from:i]...)
			p.slots = append(p.slots, e.slots[from:i]...)
			from = i + 1
		}
		j := inForceOf[i]
		if j < 0 {
			p.removed = append(p.removed, i)
			continue
		}
		at := i
		if copied {
			at = len(p.rules)
			p.rules = append(p.rules, e.rules[i])
			p.slots = append(p.slots, e.slots[i])
		}
		where[j] = at
		if !e.rules[i].IsPrefixOnly() {
			places = append(places, at)
		}
	}
	if copied {
		p.rules = append(p.rules, e.rules[from:]...)
		p.slots = append(p.slots, e.slots[from:]...)
	}
	isNew := make(map[int]bool, len(newRules))
	for _, j := range newRules {
		at := len(p.rules)
		p.rules = append(p.rules, rules[j])
		p.slots = append(p.slots, 0)
		where[j] = at
		isNew[at] = true
		if !rules[j].IsPrefixOnly() {
			places = append(places, at)
		}
	}
	next := e.maxOrder
	if moved {
		// The origin's compound rules in rules' order, in the places
		// they hold (ascending); the kept ones get new orders in their
		// records too.
		rs, ss, nw := make([]Rule, len(seq)), make([]uint32, len(seq)), make([]bool, len(seq))
		for k, j := range seq {
			rs[k], ss[k], nw[k] = p.rules[where[j]], p.slots[where[j]], isNew[where[j]]
		}
		for _, at := range places {
			delete(isNew, at)
		}
		for k, at := range places {
			p.rules[at], p.slots[at] = rs[k], ss[k]
			next++
			p.addOrder[at] = next
			if nw[k] {
				isNew[at] = true
			} else {
				p.moved = append(p.moved, at)
			}
		}
		p.recompile = true
	}
	p.added = slices.Sorted(maps.Keys(isNew))
	for _, i := range p.added {
		if _, ok := p.addOrder[i]; !ok {
			next++
			p.addOrder[i] = next
		}
	}
	return p
}

// OriginRules returns the rules of one origin in force, in their order.
func (e *Engine) OriginRules(origin string) ([]Rule, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.refreshLocked(); err != nil {
		return nil, err
	}
	var out []Rule
	for i := range e.rules {
		if e.rules[i].Origin == origin {
			out = append(out, e.rules[i])
		}
	}
	return out, nil
}

// fitsWhole reports (wrapping ErrCapacity) a rule set too big for the
// tables this engine was loaded with, from its counts alone: before the
// rule set in force is read back and the tables are built, which for
// millions of rules takes seconds and hundreds of MiB only to find that
// the program must be loaded again with bigger tables. A set that passes
// may still be found too big by the compile (IPv6 markers, the groups of
// the old set, which a change keeps beside the new one's).
func (e *Engine) fitsWhole(rs *RuleSet) error {
	n, src, dst := setCounts(rs)
	v6, dense, sparse := src.v6, src.dense, src.sparse
	if err := e.dstFits(dst.n, dst.dense, dst.sparse, dst.v6); err != nil {
		return fmt.Errorf("fastdrop: %w", err)
	}
	if maxRules := (e.nslots - int(firstRule)) / 2; n > maxRules {
		return fmt.Errorf("fastdrop: %d rules: %w: the program was loaded with room for %d rules; %s", n, ErrCapacity, maxRules, reloadAdvice)
	}
	if dense > e.groups/2 {
		return fmt.Errorf("fastdrop: IPv4 prefixes longer than /24 in %d different /24s: %w: the program was loaded with room for them in %d /24s; %s", dense, ErrCapacity, e.groups/2, reloadAdvice)
	}
	if sparse > e.sparse/2 {
		return fmt.Errorf("fastdrop: IPv4 host routes in %d different /24s: %w: the program was loaded with room for host routes in %d /24s; %s", sparse, ErrCapacity, e.sparse/2, reloadAdvice)
	}
	if v6 > e.v6cap/4*3 {
		return fmt.Errorf("fastdrop: %d IPv6 prefixes: %w: the program was loaded with an IPv6 table of %d entries, room for about %d; %s", v6, ErrCapacity, e.v6cap, e.v6cap/4*3, reloadAdvice)
	}
	return nil
}

// Add appends rules to the rule set: compound rules after the existing
// ones (so they have the lowest priority), prefix rules into the prefix
// tables. All are added at once, atomically. Adding a few rules to a big
// set costs about what the few rules cost, not the set.
func (e *Engine) Add(rules ...Rule) error {
	return e.change(func() (*plan, error) {
		// Appending leaves e.rules and e.slots as they are (they are
		// shorter), so there is no copy to make.
		p := &plan{rules: e.rules, slots: e.slots, policy: e.policy, malformed: e.malformed, addOrder: make(map[int]uint32)}
		for _, r := range rules {
			p.added = append(p.added, len(p.rules))
			p.addOrder[len(p.rules)] = e.maxOrder + uint32(len(p.added))
			p.rules = append(p.rules, r)
			p.slots = append(p.slots, 0)
		}
		return p, nil
	})
}

// Delete removes, for each of rules, the first rule of the set with the
// same text (Line does not matter), at once. It wraps ErrRuleNotFound if
// one is missing, and then changes nothing.
func (e *Engine) Delete(rules ...Rule) error {
	return e.change(func() (*plan, error) {
		gone := make(map[int]bool)
		for _, r := range rules {
			i := indexOf(e.rules, r, gone)
			if i < 0 {
				return nil, fmt.Errorf("%w: %s", ErrRuleNotFound, r)
			}
			gone[i] = true
		}
		p := &plan{policy: e.policy, malformed: e.malformed}
		n := len(e.rules) - len(gone)
		room := n + max(16, n/4) // so that the next Adds need no copy
		p.rules, p.slots = make([]Rule, 0, room), make([]uint32, 0, room)
		for i := range e.rules {
			if gone[i] {
				p.removed = append(p.removed, i)
				continue
			}
			p.rules = append(p.rules, e.rules[i])
			p.slots = append(p.slots, e.slots[i])
		}
		return p, nil
	})
}

// Replace puts rule new where the first rule with the text of old is, so
// a compound rule keeps its priority. The new rule's counters start at
// zero unless it has the same text.
func (e *Engine) Replace(old, new Rule) error {
	return e.change(func() (*plan, error) {
		i := indexOf(e.rules, old, nil)
		if i < 0 {
			return nil, fmt.Errorf("%w: %s", ErrRuleNotFound, old)
		}
		p := &plan{rules: slices.Clone(e.rules), slots: slices.Clone(e.slots), policy: e.policy, malformed: e.malformed}
		p.rules[i] = new
		if sameRule(&old, &new) {
			return p, nil // only Line differs
		}
		p.slots[i] = 0
		p.added = append(p.added, i)
		p.addOrder = map[int]uint32{i: e.orderOf[e.slots[i]]}
		p.removed = append(p.removed, i)
		return p, nil
	})
}

// namePrefixDup says which rules of the plan have the same prefix, as
// RuleSet.Validate does.
func (e *Engine) namePrefixDup(p *plan, dup *dupPrefixError) error {
	idx := func(val uint32) int {
		for i, s := range p.slots {
			if s == valSlot(val) && p.rules[i].IsPrefixOnly() {
				return i
			}
		}
		return -1
	}
	i, j := idx(dup.a), idx(dup.b)
	if i > j {
		i, j = j, i
	}
	if i < 0 {
		return dup
	}
	return fmt.Errorf("rule %d (%s): %w: %s is also rule %d (%s)", j, ruleWhere(p.rules[j]), ErrDuplicatePrefix, p.rules[j].PrefixKey(), i, ruleWhere(p.rules[i]))
}

// sameRule reports whether a and b are the same rule but for Line: for
// compound rules, the same text as written (Written), so that a rule
// written otherwise is a new one, whose record (and text) is written.
func sameRule(a, b *Rule) bool {
	if a.Origin != b.Origin {
		return false
	}
	if a.IsPrefixOnly() || b.IsPrefixOnly() {
		return a.IsPrefixOnly() && b.IsPrefixOnly() && a.PrefixKey() == b.PrefixKey() && a.Action == b.Action && a.Sample == b.Sample
	}
	return a.Written() == b.Written()
}

// plan is a change to the rule set: the new rules in order, with their
// counter slots (0 for rules to add), what is added (indices into rules)
// and removed (indices into the rules in force).
type plan struct {
	rules             []Rule
	slots             []uint32
	added, removed    []int
	policy, malformed Action
	// whole: a new set (Apply): check every rule; orders are positions.
	whole bool
	// addOrder: the orders of added rules (not whole), and of moved ones.
	addOrder map[int]uint32
	// moved: rules kept (indices into rules) whose records take a new
	// order, addOrder's (not whole).
	moved []int
	// recompile: the compound rules changed order (not whole).
	recompile bool
}

// order is the order of rule i of the plan's rules, if added or whole.
func (p *plan) order(i int) uint32 {
	if p.whole {
		return uint32(i)
	}
	return p.addOrder[i]
}

// planApply matches the rules of a whole new set with those in force:
// a rule with the same key keeps its slot.
func (e *Engine) planApply(rules []Rule, policy, malformed Action) *plan {
	p := &plan{rules: rules, slots: make([]uint32, len(rules)), policy: policy, malformed: malformed, whole: true}
	ck := compoundKeys(rules)
	kept := make([]bool, e.nslots)
	// A prefix rule keeps its slot (and record) only in its own origin:
	// the origins of the prefix rules in force, where not the default.
	var prefixOrigin map[uint32]string
	for i := range e.rules {
		if e.rules[i].Origin != "" && e.rules[i].IsPrefixOnly() {
			if prefixOrigin == nil {
				prefixOrigin = make(map[uint32]string)
			}
			prefixOrigin[e.slots[i]] = e.rules[i].Origin
		}
	}
	// A prefix rule is found by its prefix and action, which do not
	// say its sample modifier: one whose modifier changed is a new rule
	// (its record, which the program reads, is written afresh).
	var sampleOf map[uint32]uint32
	for i := range e.rules {
		if e.rules[i].Sample != 0 && e.rules[i].IsPrefixOnly() {
			if sampleOf == nil {
				sampleOf = make(map[uint32]uint32)
			}
			sampleOf[e.slots[i]] = e.rules[i].Sample
		}
	}
	for i := range rules {
		var s uint32
		var ok bool
		if k, compound := ck[i]; compound {
			s, ok = e.textSlot[k]
		} else if rules[i].IsPrefixOnly() {
			s, ok = e.prefixIndex().get(slotKeyOfRule(&rules[i]))
			ok = ok && prefixOrigin[s] == rules[i].Origin
			ok = ok && sampleOf[s] == rules[i].Sample
		}
		if ok && !kept[s] {
			p.slots[i] = s
			kept[s] = true
		} else {
			p.added = append(p.added, i)
		}
	}
	for i, s := range e.slots {
		if !kept[s] {
			p.removed = append(p.removed, i)
		}
	}
	return p
}

// indexOf returns the first rule of rules that is r (but for Line), of
// r's origin, and not in skip, or -1.
func indexOf(rules []Rule, r Rule, skip map[int]bool) int {
	if r.IsPrefixOnly() {
		k := r.PrefixKey()
		for i := range rules {
			if rules[i].IsPrefixOnly() && rules[i].PrefixKey() == k && rules[i].Action == r.Action && rules[i].Origin == r.Origin && !skip[i] {
				return i
			}
		}
		return -1
	}
	s := r.String()
	for i := range rules {
		if !rules[i].IsPrefixOnly() && !skip[i] && rules[i].Origin == r.Origin && rules[i].String() == s {
			return i
		}
	}
	return -1
}

// change runs one update under the locks.
func (e *Engine) change(make func() (*plan, error)) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lockDir != nil {
		if err := unix.Flock(int(e.lockDir.Fd()), unix.LOCK_EX); err != nil {
			return fmt.Errorf("fastdrop: lock %s: %w", e.lockDir.Name(), err)
		}
		defer unix.Flock(int(e.lockDir.Fd()), unix.LOCK_UN)
	}
	e.locked = true
	defer func() { e.locked = false }()
	if e.unfreed {
		e.loaded = false // read again, and free them, under the lock
	}
	if err := e.refreshLocked(); err != nil {
		return err
	}
	p, err := make()
	if err != nil {
		return fmt.Errorf("fastdrop: %w", err)
	}
	if err := e.check(p); err != nil {
		return fmt.Errorf("fastdrop: %w", err)
	}
	if err := e.ensureTablesLocked(); err != nil {
		return err
	}
	return e.commitLocked(p)
}

// check validates a plan: a whole set like RuleSet.Validate, a change by
// its added rules against the rest.
func (e *Engine) check(p *plan) error {
	if p.whole {
		if err := validateRules(p.rules, p.policy, p.malformed); err != nil {
			return err
		}
	} else {
		// A prefix given twice is found when the tables are changed.
		compound := e.ncompound
		for _, i := range p.removed {
			if !e.rules[i].IsPrefixOnly() {
				compound--
			}
		}
		for _, i := range p.added {
			r := &p.rules[i]
			if err := r.validate(); err != nil {
				return fmt.Errorf("rule %s: %w", ruleWhere(*r), err)
			}
			if !r.IsPrefixOnly() {
				if compound++; compound > MaxCompoundRules {
					return fmt.Errorf("rule %s: %w: more than %d", ruleWhere(*r), ErrTooManyRules, MaxCompoundRules)
				}
			}
		}
	}
	if !p.policy.valid() {
		return fmt.Errorf("policy %s: %w", p.policy, ErrUnsupportedAction)
	}
	if p.malformed != ActionDrop && p.malformed != ActionPass {
		return fmt.Errorf("malformed verdict %s: %w", p.malformed, ErrUnsupportedAction)
	}
	if p.policy == ActionLimit {
		return fmt.Errorf("policy %s: %w", p.policy, ErrUnsupportedAction)
	}
	if maxRules := (e.nslots - int(firstRule)) / 2; len(p.rules) > maxRules {
		return fmt.Errorf("%d rules: %w: the program was loaded with room for %d rules; %s", len(p.rules), ErrCapacity, maxRules, reloadAdvice)
	}
	return nil
}

// refreshLocked reloads the rule set if another process changed it.
func (e *Engine) refreshLocked() error {
	st, err := e.readState()
	if err != nil {
		return err
	}
	if e.loaded && st.Generation == e.generation && st.Active == e.active {
		return nil
	}
	if e.lockDir == nil || e.locked {
		return e.loadLocked()
	}
	// Without the lock another process may flip while the records are
	// read: read them again until the generation stayed the same.
	for try := 0; ; try++ {
		if err := e.loadLocked(); err != nil || try == 10 {
			return err
		}
		st, err := e.readState()
		if err != nil {
			return err
		}
		if st.Generation == e.generation && st.Active == e.active {
			return nil
		}
	}
}

// The state is at the start of fd_main, and half h's fd_conf at the start
// of its struct fd_half.
func ctlConfOffset(h uint32) int64 { return mainHalf + int64(h)*halfSize }

func (e *Engine) readState() (gen.FastdropFdState, error) {
	st, err := readState(e.mem.ctl)
	st.Active = e.mem.active.load() // the matching load of writeState's store
	return st, err
}

func readState(ctl io.ReaderAt) (gen.FastdropFdState, error) {
	var st gen.FastdropFdState
	b := make([]byte, binary.Size(st))
	if _, err := ctl.ReadAt(b, 0); err != nil {
		return st, fmt.Errorf("fastdrop: read state: %w", err)
	}
	if _, err := binary.Decode(b, binary.NativeEndian, &st); err != nil {
		return st, fmt.Errorf("fastdrop: read state: %w", err)
	}
	return st, nil
}

// writeState writes the state, Active last: it is all that packets read,
// and it is published with a release store (activeWord), after the half's
// tables and the rest of the state.
func (e *Engine) writeState(st gen.FastdropFdState) error {
	b, err := binary.Append(nil, binary.NativeEndian, &st)
	if err == nil {
		_, err = e.mem.ctl.WriteAt(b[4:], 4)
	}
	if err != nil {
		return fmt.Errorf("fastdrop: write state: %w", err)
	}
	e.mem.active.store(st.Active)
	return nil
}

func readConf(ctl io.ReaderAt, h uint32) (gen.FastdropFdConf, error) {
	var c gen.FastdropFdConf
	b := make([]byte, binary.Size(c))
	if _, err := ctl.ReadAt(b, ctlConfOffset(h)); err != nil {
		return c, fmt.Errorf("read configuration: %w", err)
	}
	if _, err := binary.Decode(b, binary.NativeEndian, &c); err != nil {
		return c, fmt.Errorf("read configuration: %w", err)
	}
	return c, nil
}

// writeConf writes half h's configuration; h must not be the active half.
func (e *Engine) writeConf(h uint32, c gen.FastdropFdConf) error {
	b, err := binary.Append(nil, binary.NativeEndian, &c)
	if err == nil {
		_, err = e.mem.ctl.WriteAt(b, ctlConfOffset(h))
	}
	if err != nil {
		return fmt.Errorf("write configuration: %w", err)
	}
	// c.Features has no FD_FEAT_CAPTURE: captures are other processes'.
	return syncCapture(e.mem.ctl)
}

// writeDconf writes half h's fd_half.dconf (the destination table's IPv6
// parameters); h must not be the active half.
func (e *Engine) writeDconf(h uint32, c gen.FastdropFdConf) error {
	b, err := binary.Append(nil, binary.NativeEndian, &c)
	if err == nil {
		_, err = e.mem.ctl.WriteAt(b, ctlConfOffset(h)+halfDconf)
	}
	if err != nil {
		return fmt.Errorf("write configuration: %w", err)
	}
	return nil
}

// loadLocked rebuilds the engine's view of the rule set from the kernel:
// the rules of the active half from fd_rules, the policies and compound
// order from its fd_conf. The table mirrors are left to
// ensureTablesLocked: reading a million rules back costs what reading
// their records costs, not what building the tables costs.
func (e *Engine) loadLocked() error {
	st, err := e.readState()
	if err != nil {
		return err
	}
	active := st.Active & 1
	conf, err := readConf(e.mem.ctl, active)
	if err != nil {
		return fmt.Errorf("fastdrop: %w", err)
	}
	e.loaded = false
	e.resetRules()
	if err := e.closeTables(); err != nil {
		return fmt.Errorf("fastdrop: %w", err)
	}
	e.tablesStale = true

	// The active half's counts size the slices (a hint: records of a
	// change that did not finish may add some), with room so that the
	// next Adds need no copy of a million rules.
	want := min(int(conf.Ncompound)+int(conf.V4Count)+int(conf.V6Count)+int(conf.D4Count)+int(conf.D6Count), e.nslots)
	want += max(16, want/8)
	rules := make([]Rule, 0, want)
	slots := make([]uint32, 0, want)
	orders := make([]uint32, 0, want)
	var stale []uint32
	sorted := true
	gnow := uint32(st.Generation)
	// The records are read a chunk at a time, not as one buffer the size
	// of the map (hundreds of MiB, mostly free slots).
	const chunk = 1 << 16
	buf := make([]byte, min(chunk, e.nslots)*recSize)
	for base := 0; base < e.nslots; base += chunk {
		n := min(chunk, e.nslots-base)
		b := buf[:n*recSize]
		if _, err := e.mem.rules.ReadAt(b, int64(base)*int64(recSize)); err != nil {
			return fmt.Errorf("fastdrop: read rules: %w", err)
		}
		for k := range n {
			s := uint32(base + k)
			rb := b[k*recSize : (k+1)*recSize]
			if s < firstRule || rb[recAction] == 0 {
				continue
			}
			added, removed := binary.LittleEndian.Uint32(rb[recAdded:]), binary.LittleEndian.Uint32(rb[recRemoved:])
			if !recLive(added, removed, gnow) {
				stale = append(stale, s)
				continue
			}
			rules = append(rules, Rule{})
			order := decodeRecordInto(rb, &rules[len(rules)-1])
			if flags := binary.LittleEndian.Uint32(rb[recFlags:]); flags&(recFlagLists|recFlagText) != 0 {
				r := &rules[len(rules)-1]
				if flags&recFlagLists != 0 {
					b, err := e.readSide(sideLists, s)
					if err == nil {
						err = decodeLists(b, r)
					}
					if err != nil {
						return err
					}
				}
				if flags&recFlagText != 0 {
					b, err := e.readSide(sideText, s)
					if err != nil {
						return err
					}
					r.Text = decodeText(b)
				}
			}
			if r := &rules[len(rules)-1]; r.Action == ActionLimit {
				var idx uint16
				r.Limit, idx, e.pol.epoch[s] = decodeLimit(rb)
				e.pol.of[s] = idx
			}
			if len(orders) > 0 && order < orders[len(orders)-1] {
				sorted = false
			}
			slots = append(slots, s)
			orders = append(orders, order)
			e.genOf[s] = added
			e.nextSlot = max(e.nextSlot, s+1)
		}
	}
	if !sorted {
		// By order, then slot (the order they were read in): a stable
		// sort of small keys, then one pass to move the rules.
		idx := make([]uint64, len(rules))
		for i, o := range orders {
			idx[i] = uint64(o)<<32 | uint64(i)
		}
		slices.Sort(idx)
		r2, s2, o2 := make([]Rule, len(rules), cap(rules)), make([]uint32, len(rules), cap(rules)), make([]uint32, len(rules))
		for i, x := range idx {
			j := uint32(x)
			r2[i], s2[i], o2[i] = rules[j], slots[j], orders[j]
		}
		rules, slots, orders = r2, s2, o2
	}
	// Compound priority is what the active half's fd_conf says, even if a
	// change that failed half-way rewrote some orders: the compound rules
	// keep their places among the rules but take fd_conf's sequence, and
	// those it does not list are left out.
	bySlot := make(map[uint32]int)
	for i := range rules {
		if !rules[i].IsPrefixOnly() {
			bySlot[slots[i]] = i
		}
	}
	if len(bySlot) > 0 {
		var corder []int
		for i := range min(int(conf.Ncompound), len(conf.Crule)) {
			if j, ok := bySlot[e.cvalSlot(conf.Crule[i])]; ok {
				corder = append(corder, j)
			}
		}
		r2, s2, o2 := make([]Rule, 0, cap(rules)), make([]uint32, 0, cap(rules)), make([]uint32, 0, len(rules))
		ci := 0
		for i := range rules {
			j := i
			if !rules[i].IsPrefixOnly() {
				if ci >= len(corder) {
					continue // not in the active half's compound list
				}
				j = corder[ci]
				ci++
			}
			r2, s2, o2 = append(r2, rules[j]), append(s2, slots[j]), append(o2, orders[j])
		}
		rules, slots, orders = r2, s2, o2
	}
	e.rules, e.slots = rules, slots
	e.nsampled = 0
	for i := range rules {
		if rules[i].Sample != 0 {
			e.nsampled++
		}
	}
	for i, s := range slots {
		e.orderOf[s] = orders[i]
		e.maxOrder = max(e.maxOrder, orders[i])
	}
	ck := compoundKeys(e.rules)
	for i, k := range ck {
		e.textSlot[k] = e.slots[i]
	}
	e.ncompound = len(ck)
	used := make([]bool, e.nextSlot)
	for _, s := range e.slots {
		used[s] = true
	}
	for s := firstRule; s < e.nextSlot; s++ {
		if !used[s] {
			e.free = append(e.free, s)
		}
	}
	// Free what a change that did not finish left (rules of a generation
	// that never came, or gone but not freed), counters too; but only
	// holding the lock: without it (a reader: rules list, stats, the
	// agent's look at what is in force), the records of a generation not
	// come yet are another process's change going on, and freeing them
	// would take its new rules' records (and counters) away under it.
	e.unfreed = false
	if e.lockDir != nil && !e.locked && len(stale) > 0 {
		e.unfreed = true
		stale = nil
		// Their slots are not free for this engine's changes either
		// (change reads the rules again first).
	}
	var zero [recSize]byte
	freed := make([]recWrite, 0, len(stale))
	for _, s := range stale {
		if _, err := e.mem.rules.WriteAt(zero[:], int64(s)*int64(recSize)); err != nil {
			return fmt.Errorf("fastdrop: clear rule record: %w", err)
		}
		freed = append(freed, recWrite{slot: s})
	}
	if len(freed) > 0 {
		// Their lists and texts too, if they had any (after the records).
		if err := e.deleteSide(freed); err != nil {
			return err
		}
	}
	if err := e.zeroSlots(stale); err != nil {
		return fmt.Errorf("fastdrop: %w", err)
	}
	e.policy = actionOr(Action(conf.Policy), ActionPass)
	e.malformed = actionOr(Action(conf.Malformed), ActionPass)
	e.active = active
	e.generation = st.Generation
	// A change that did not finish may have left the inactive half
	// different from the active one.
	e.fullWrite = st.InSync == 0
	e.loaded = true
	return nil
}

// ensureTablesLocked rebuilds the table mirrors from the rule set in
// force if loadLocked left them out.
func (e *Engine) ensureTablesLocked() error {
	if !e.tablesStale {
		return nil
	}
	if err := e.resetTables(); err != nil {
		return err
	}
	if err := e.compileAll(); err != nil {
		return fmt.Errorf("fastdrop: rebuild tables: %w", err)
	}
	e.tablesStale = false
	return nil
}

func actionOr(a, def Action) Action {
	if a == 0 {
		return def
	}
	return a
}

// compileAll makes the mirrors hold e.rules, which the active half holds:
// tbl24 read back from it, the rest rebuilt (and written whole to both
// halves by the next change).
func (e *Engine) compileAll() error {
	var v4, d4 []v4Prefix
	var v6, d6 []v6Prefix
	for i := range e.rules {
		r := &e.rules[i]
		if !r.IsPrefixOnly() {
			continue
		}
		val := mkVal(r.Action, e.slots[i])
		switch k := r.PrefixKey(); {
		case k.Dst && k.Prefix.Addr().Is4():
			d4 = append(d4, v4PrefixOf(k.Prefix, val))
		case k.Dst:
			d6 = append(d6, v6PrefixOf(k.Prefix, val))
		case k.Prefix.Addr().Is4():
			v4 = append(v4, v4PrefixOf(k.Prefix, val))
		default:
			v6 = append(v6, v6PrefixOf(k.Prefix, val))
		}
	}
	half24 := io.NewSectionReader(e.mem.tbl24, int64(e.active)*halfSize, tbl24Entries*4)
	if err := e.v4.reload(half24, v4); err != nil {
		return err
	}
	if err := e.v6.build(v6); err != nil {
		return err
	}
	e.v6dirty = true
	if err := e.dst.reload(e.active, d4, d6); err != nil {
		return err
	}
	cls, err := compileRules(e.rules, e.slots, e.cval)
	if err != nil {
		return err
	}
	e.cls = cls
	e.ncompound = len(cls.vals)
	return nil
}

// compileRules compiles the compound rules of rules, whose counter slots
// are slots, in the order they are evaluated (compoundOrder).
func compileRules(rules []Rule, slots []uint32, val func(*Rule, uint32) uint32) (*classifier, error) {
	order, early := compoundOrder(rules)
	compound := make([]*Rule, len(order))
	vals := make([]uint32, len(order))
	for k, i := range order {
		compound[k] = &rules[i]
		vals[k] = val(&rules[i], slots[i])
	}
	cls, err := compileCompound(compound)
	if err != nil {
		return nil, err
	}
	cls.vals = vals
	cls.lateFrom = early
	return cls, nil
}

// commitLocked makes the plan the rule set in force: compile, write the
// inactive half, flip, wait, write the other half.
func (e *Engine) commitLocked(p *plan) error {
	// Before anything changes: the wait between the halves needs them.
	if err := e.makeSyncMaps(); err != nil {
		return err
	}
	free := slices.Clone(e.free)
	nextSlot := e.nextSlot
	for _, i := range p.added {
		if n := len(free); n > 0 {
			p.slots[i] = free[n-1]
			free = free[:n-1]
		} else if int(nextSlot) < e.nslots {
			p.slots[i] = nextSlot
			nextSlot++
		} else {
			return fmt.Errorf("fastdrop: %d rules: no free counter slot: %w; %s", len(p.rules), ErrCapacity, reloadAdvice)
		}
	}
	old := struct {
		rules []Rule
		slots []uint32
	}{e.rules, e.slots}
	given, err := e.assignPolice(p, uint32(e.generation+1))
	if err != nil {
		return fmt.Errorf("fastdrop: %w", err)
	}
	if err := e.banLens(p.rules); err != nil {
		e.undoPolice(given)
		return err
	}
	if err := e.compileChange(p); err != nil {
		e.undoPolice(given)
		// The mirrors may be half changed: make them what the kernel
		// holds, which nothing has touched.
		if rerr := e.compileAll(); rerr != nil {
			e.tablesStale = true // rebuilt whole by the next change
			return errors.Join(fmt.Errorf("fastdrop: %w", err), fmt.Errorf("fastdrop: rebuild tables: %w", rerr))
		}
		var dup *dupPrefixError
		if errors.As(err, &dup) {
			return fmt.Errorf("fastdrop: %w", e.namePrefixDup(p, dup))
		}
		return fmt.Errorf("fastdrop: %w", err)
	}
	if e.prefixSlot != nil && len(p.added)+len(p.removed) > len(p.rules)/8 {
		e.prefixSlot = nil // cheaper made again when needed
	}
	if e.prefixSlot != nil {
		for _, i := range p.removed {
			if r := &e.rules[i]; r.IsPrefixOnly() {
				e.prefixSlot.del(slotKeyOfRule(r))
			}
		}
		for _, i := range p.added {
			if r := &p.rules[i]; r.IsPrefixOnly() {
				e.prefixSlot.put(slotKeyOfRule(r), p.slots[i])
			}
		}
	}
	if e.cls.rebuilt {
		ck := compoundKeys(p.rules)
		e.textSlot = make(map[string]uint32, len(ck))
		for i, k := range ck {
			e.textSlot[k] = p.slots[i]
		}
	}
	for _, i := range p.added {
		if p.rules[i].Sample != 0 {
			e.nsampled++
		}
	}
	for _, i := range p.removed {
		if old.rules[i].Sample != 0 {
			e.nsampled--
		}
	}
	e.rules, e.slots = p.rules, p.slots
	e.policy, e.malformed = p.policy, p.malformed
	e.free, e.nextSlot = free, nextSlot
	e.ncompound = len(e.cls.vals)

	if err := e.publishLocked(p, old.rules, old.slots); err != nil {
		// Start again from what the kernel holds (the old set or the new
		// one, whichever got to be active).
		if rerr := e.loadLocked(); rerr != nil {
			return errors.Join(fmt.Errorf("fastdrop: %w", err), rerr)
		}
		e.mem.active.setRuleSamples(e.nsampled > 0)
		return errors.Join(fmt.Errorf("fastdrop: %w", err), syncCapture(e.mem.ctl))
	}
	// After the flip: the records of the new set, which the program reads
	// for their sample modifiers, are written.
	e.mem.active.setRuleSamples(e.nsampled > 0)
	return syncCapture(e.mem.ctl)
}

// compileChange updates the mirrors from the rule set in force to the
// plan's: the IPv4 table entry by entry unless that costs more than a new
// one, the IPv6 table and the compound rules whole if they change.
func (e *Engine) compileChange(p *plan) error {
	var v4add, v4del []v4Prefix
	v6changed, compoundChanged := e.fullWrite, e.fullWrite
	if err := e.changeDst(p); err != nil {
		return err
	}
	for _, i := range p.added {
		r := &p.rules[i]
		switch {
		case !r.IsPrefixOnly():
			compoundChanged = true
		case r.Dst.IsValid():
			// the destination table's: changeDst
		case r.Src.Addr().Is4():
			v4add = append(v4add, v4PrefixOf(r.Src, mkVal(r.Action, p.slots[i])))
		default:
			v6changed = true
		}
	}
	for _, i := range p.removed {
		r := &e.rules[i]
		switch {
		case !r.IsPrefixOnly():
			compoundChanged = true
		case r.Dst.IsValid():
		case r.Src.Addr().Is4():
			v4del = append(v4del, v4PrefixOf(r.Src, mkVal(r.Action, e.slots[i])))
		default:
			v6changed = true
		}
	}
	err := e.v4.change(v4add, v4del, e.fullWrite, e.groups, e.sparse, "IPv4", func() []v4Prefix { return p.v4Prefixes(false) })
	if err != nil {
		return err
	}
	if v6changed {
		if err := e.v6.build(p.v6Prefixes(false)); err != nil {
			return err
		}
		e.v6dirty = true
	}
	if compoundChanged || p.whole || p.recompile {
		cls, err := compileRules(p.rules, p.slots, e.cval)
		if err != nil {
			return err
		}
		cls.rebuilt = true
		e.cls = cls
	} else {
		e.cls.rebuilt = false
	}
	return nil
}

// publishLocked writes the compiled change to the inactive half, flips,
// waits for the programs still using the old half, and writes the change
// to that half too. The plan's rules are e.rules by now; its removed
// indices are into oldRules.
func (e *Engine) publishLocked(p *plan, oldRules []Rule, oldSlots []uint32) error {
	added, removed := p.added, p.removed
	inactive, prev := e.active^1, e.active
	generation := e.generation
	// in_sync 0 until both halves are written: a later Open then knows
	// the inactive half is not a copy of the active one.
	if err := e.writeState(gen.FastdropFdState{Active: prev, Generation: generation}); err != nil {
		return err
	}
	// The records say which generation each rule came and went with; the
	// flip makes them true. Slots of removed rules, and so their counters,
	// are kept until the change is over.
	next := uint32(generation + 1)
	// Preallocated: grown by append, a million records cost 0.8 s of CPU.
	recs := make([]recWrite, 0, len(removed)+len(added))
	for _, i := range removed {
		recs = append(recs, recWrite{oldSlots[i], &oldRules[i], e.orderOf[oldSlots[i]], e.addedGen(oldSlots[i]), next})
	}
	for _, i := range added {
		e.orderOf[e.slots[i]] = p.order(i)
		e.maxOrder = max(e.maxOrder, p.order(i))
		recs = append(recs, recWrite{e.slots[i], &e.rules[i], p.order(i), next, 0})
	}
	for _, i := range p.moved {
		s := e.slots[i]
		e.orderOf[s] = p.addOrder[i]
		e.maxOrder = max(e.maxOrder, p.addOrder[i])
		recs = append(recs, recWrite{s, &e.rules[i], p.addOrder[i], e.addedGen(s), 0})
	}
	if p.whole { // rules kept in a new set may have moved
		isAdded := make([]bool, len(e.rules))
		for _, i := range added {
			isAdded[i] = true
		}
		for i, s := range e.slots {
			if !isAdded[i] && e.orderOf[s] != uint32(i) {
				e.orderOf[s] = uint32(i)
				recs = append(recs, recWrite{s, &e.rules[i], uint32(i), e.addedGen(s), 0})
			}
		}
	}
	if err := e.writeRecords(recs); err != nil {
		return err
	}
	for _, i := range added {
		e.genOf[e.slots[i]] = next
	}
	if e.publishHook != nil {
		e.publishHook()
	}

	// The new tbl8 groups first: the tables written next point to them;
	// so do the policers.
	if err := e.v4.flush(); err != nil {
		return err
	}
	if err := e.dst.flush(); err != nil {
		return err
	}
	if err := e.writePolicers(e.rules, e.slots, added); err != nil {
		return err
	}
	if err := e.writeHalf(inactive); err != nil {
		return err
	}
	if err := e.writeState(gen.FastdropFdState{Active: inactive, Generation: generation + 1}); err != nil {
		return err
	}
	e.active, e.generation = inactive, generation+1
	if err := e.waitPrograms(); err != nil {
		return err
	}
	if err := e.writeHalf(prev); err != nil {
		return err
	}
	recs = recs[:0]
	var gone []uint32
	var goneActions []Action
	for _, i := range removed {
		gone = append(gone, oldSlots[i])
		goneActions = append(goneActions, oldRules[i].Action)
		recs = append(recs, recWrite{slot: oldSlots[i]}) // free
	}
	// Free slots have zero counters, so that a new rule starts at zero.
	if err := e.retireSlots(gone, goneActions); err != nil {
		return err
	}
	if err := e.retirePolice(gone); err != nil {
		return err
	}
	if err := e.zeroSlots(gone); err != nil {
		return err
	}
	if err := e.writeRecords(recs); err != nil {
		return err
	}
	e.free = append(e.free, gone...)
	if err := e.writeState(gen.FastdropFdState{Active: inactive, InSync: 1, Generation: generation + 1}); err != nil {
		return err
	}
	e.v4.committed()
	e.v6dirty = false
	e.dst.committed()
	e.fullWrite = false
	return nil
}

// recWrite is one rule record to write; rule nil frees the slot.
type recWrite struct {
	slot           uint32
	rule           *Rule
	order          uint32
	added, removed uint32
}

// writeRecords writes rule records, a run of consecutive slots at a time.
func (e *Engine) writeRecords(ws []recWrite) error {
	bySlot := func(a, b recWrite) int { return int(int64(a.slot) - int64(b.slot)) }
	if !slices.IsSortedFunc(ws, bySlot) {
		slices.SortFunc(ws, bySlot)
	}
	var buf []byte
	for i := 0; i < len(ws); {
		j := i + 1
		for j < len(ws) && ws[j].slot == ws[j-1].slot+1 && j-i < 1<<16 {
			j++
		}
		buf = slices.Grow(buf[:0], (j-i)*recSize)[:(j-i)*recSize]
		// A record that says its fields are in fd_rule_lists (or its text
		// in fd_rule_text) is written after them, and an entry no record
		// needs any more is deleted after the record: a later process
		// always finds what a record refers to.
		if err := e.writeSide(ws[i:j]); err != nil {
			return err
		}
		for k, w := range ws[i:j] {
			b := buf[k*recSize : (k+1)*recSize]
			if w.rule == nil {
				clear(b)
			} else {
				encodeRecord(b, w.rule, w.order, w.added, w.removed)
				if w.rule.Limit != nil {
					encodeLimit(b, w.rule.Limit, e.pol.of[w.slot])
				}
			}
		}
		if _, err := e.mem.rules.WriteAt(buf, int64(ws[i].slot)*int64(recSize)); err != nil {
			return fmt.Errorf("write rule records: %w", err)
		}
		if err := e.deleteSide(ws[i:j]); err != nil {
			return err
		}
		i = j
	}
	return nil
}

func (e *Engine) addedGen(slot uint32) uint32 { return e.genOf[slot] }

// A side map holds, by rule slot, what some records refer to but cannot
// hold themselves: fd_rule_lists a rule's value lists (fields_num.go),
// fd_rule_text its text as written (Rule.Text). A record's flag
// (FD_REC_LISTS, FD_REC_TEXT) says its slot has an entry.
const (
	sideLists = iota
	sideText
	sideMaps
)

// sideSpec is a side map's name, value size and the entry a rule needs
// in it (nil: none).
type sideSpec struct {
	name, what string
	size       int
	encode     func(r *Rule) []byte
}

var sideSpecs = [sideMaps]sideSpec{
	sideLists: {gen.FastdropMapFdRuleLists, "lists", listsSize, encodeLists},
	sideText:  {gen.FastdropMapFdRuleText, "text", textSize, encodeText},
}

// sideMap returns side map k, with e.sideSlots[k] read from it the first
// time.
func (e *Engine) sideMap(k int) (*ebpf.Map, error) {
	m := e.maps[sideSpecs[k].name]
	if e.sideSlots[k] == nil {
		e.sideSlots[k] = make(map[uint32]bool)
		var key uint32
		v := make([]byte, sideSpecs[k].size)
		it := m.Iterate()
		for it.Next(&key, &v) {
			e.sideSlots[k][key] = true
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("fastdrop: read rule %s: %w", sideSpecs[k].what, err)
		}
	}
	return m, nil
}

// writeSide writes the side maps' entries of the rules of ws that need
// them.
func (e *Engine) writeSide(ws []recWrite) error {
	for k := range sideMaps {
		var m *ebpf.Map
		for _, w := range ws {
			if w.rule == nil {
				continue
			}
			b := sideSpecs[k].encode(w.rule)
			if b == nil {
				continue
			}
			if m == nil {
				var err error
				if m, err = e.sideMap(k); err != nil {
					return err
				}
			}
			if err := m.Put(w.slot, b); err != nil {
				return fmt.Errorf("fastdrop: write the %s of rule %q: %w", sideSpecs[k].what, w.rule.String(), err)
			}
			e.sideSlots[k][w.slot] = true
		}
	}
	return nil
}

// deleteSide deletes the side maps' entries of the slots of ws whose
// rules (if any) no longer need them.
func (e *Engine) deleteSide(ws []recWrite) error {
	for k := range sideMaps {
		if len(e.sideSlots[k]) == 0 && e.sideSlots[k] != nil {
			continue
		}
		m, err := e.sideMap(k)
		if err != nil {
			return err
		}
		for _, w := range ws {
			if !e.sideSlots[k][w.slot] || w.rule != nil && sideSpecs[k].encode(w.rule) != nil {
				continue
			}
			if err := m.Delete(w.slot); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("fastdrop: delete rule %s: %w", sideSpecs[k].what, err)
			}
			delete(e.sideSlots[k], w.slot)
		}
	}
	return nil
}

// readSide returns slot's entry of side map k.
func (e *Engine) readSide(k int, slot uint32) ([]byte, error) {
	m, err := e.sideMap(k)
	if err != nil {
		return nil, err
	}
	b := make([]byte, sideSpecs[k].size)
	if err := m.Lookup(slot, &b); err != nil {
		return nil, fmt.Errorf("fastdrop: read the %s of rule slot %d: %w", sideSpecs[k].what, slot, err)
	}
	return b, nil
}

// prefixIndex returns e.prefixSlot, made from the rules if need be.
func (e *Engine) prefixIndex() *prefixIndex {
	if e.prefixSlot == nil {
		e.prefixSlot = newPrefixIndex(len(e.rules))
		for i := range e.rules {
			if r := &e.rules[i]; r.IsPrefixOnly() {
				e.prefixSlot.put(slotKeyOfRule(r), e.slots[i])
			}
		}
	}
	return e.prefixSlot
}

// waitPrograms returns once every run of the program that started before
// the call has ended.
func (e *Engine) waitPrograms() error {
	if err := e.makeSyncMaps(); err != nil {
		return err
	}
	if err := e.syncOuter.Put(uint32(0), e.syncInner); err != nil {
		return fmt.Errorf("wait for running programs: %w", err)
	}
	return nil
}

// writeHalf copies what changed in the mirrors into half h.
func (e *Engine) writeHalf(h uint32) error {
	base24 := int64(h) * halfSize
	err := e.v4.forDirty(func(start, end int) error {
		_, err := e.mem.tbl24.WriteAt(u32Bytes(e.v4.tbl24[start:end]), base24+int64(start)*4)
		return err
	})
	if err != nil {
		return fmt.Errorf("write IPv4 prefix table: %w", err)
	}
	if e.v6dirty || e.fullWrite {
		if _, err := e.mem.v6.WriteAt(e.v6.buf, int64(h)*int64(e.v6cap)*int64(v6EntSize)); err != nil {
			return fmt.Errorf("write IPv6 prefix table: %w", err)
		}
	}
	if err := e.dst.writeHalf(h, e.fullWrite); err != nil {
		return err
	}
	if e.dst != nil {
		if err := e.writeDconf(h, e.dst.dconf(h)); err != nil {
			return err
		}
	}
	if e.cls.rebuilt || e.fullWrite {
		if err := e.writeClassifier(h); err != nil {
			return err
		}
	}
	return e.writeConf(h, e.confFor(h))
}

func (e *Engine) writeClassifier(h uint32) error {
	c := e.cls
	half := int64(h) * halfSize // half h's struct fd_cls_half
	for fld := range numField {
		if c.fields&(1<<fld) == 0 {
			continue
		}
		// (No table for IPv4 fields with at most 64 rules: wideTries.)
		if tab := c.tabs[fld]; len(tab) > 0 {
			if _, err := e.mem.cls.WriteAt(u16Bytes(tab), half+clsTab+int64(fieldTab(fld))*2); err != nil {
				return fmt.Errorf("write compound rule tables: %w", err)
			}
		}
		start := fld * bmField
		if _, err := e.mem.cls.WriteAt(bmBytes(c.bm[start:start+c.used[fld]]), half+clsBm+int64(start)*32); err != nil {
			return fmt.Errorf("write compound rule bitmaps: %w", err)
		}
	}
	if len(c.pool) > 0 {
		if _, err := e.mem.cls.WriteAt(u16Bytes(c.pool), half+clsTab+int64(tabPool)*2); err != nil {
			return fmt.Errorf("write compound rule tables: %w", err)
		}
	}
	for fld, s := range c.b64 {
		if len(s) == 0 {
			continue
		}
		if _, err := e.mem.cls.WriteAt(u64Bytes(s), half+clsB64+int64(fieldB64(fld))*8); err != nil {
			return fmt.Errorf("write compound rule bitmaps: %w", err)
		}
	}
	// The IPv6 prefixes with an offset (FD_BM_OFF6): mask and value,
	// then the rules, per entry.
	if len(c.off6) > 0 {
		b := make([]bitmap, 0, 2*len(c.off6))
		for _, o := range c.off6 {
			b = append(b, bitmap{o.mask[0], o.mask[1], o.val[0], o.val[1]}, o.bm)
		}
		if _, err := e.mem.cls.WriteAt(bmBytes(b), half+clsBm+bmOff6*32); err != nil {
			return fmt.Errorf("write compound rule bitmaps: %w", err)
		}
	}
	// The front tables (one-word entries, or classes and their bitmaps)
	// and the IPv4 fields' two-level tries.
	for _, f := range []struct {
		b   []byte
		off int64 // bytes into the half
	}{
		{u64Bytes(c.frontPorts), clsB64 + b64Ports*8},
		{u64Bytes(c.frontProto), clsB64 + b64Front*8},
		{u16Bytes(c.frontPortsCls), clsTab + tabFPorts*2},
		{u16Bytes(c.frontProtoCls), clsTab + tabFProto*2},
		{bmBytes(c.frontBm), clsBm + bmFront*32},
		{u16Bytes(c.w4[0]), clsTab + tabW4*2},
		{u16Bytes(c.w4[1]), clsTab + (tabW4+1<<20)*2},
		{u16Bytes(c.w4pool), clsTab + tabW4Pool*2},
	} {
		if len(f.b) == 0 {
			continue
		}
		if _, err := e.mem.cls.WriteAt(f.b, half+f.off); err != nil {
			return fmt.Errorf("write compound rule tables: %w", err)
		}
	}
	return nil
}

// confFor is fd_conf for half h.
func (e *Engine) confFor(h uint32) gen.FastdropFdConf {
	c := gen.FastdropFdConf{
		Policy:    gen.FastdropFdAction(e.policy),
		Malformed: gen.FastdropFdAction(e.malformed),
		Fields:    e.cls.fields,
		V4Count:   uint32(e.v4.count),
		V6Count:   uint32(e.v6.count),
		Half:      h,
		V6Mask:    uint32(max(e.v6.size, 1) - 1),
		V6Shift:   e.v6.shift(),
		V6Default: e.v6.def,
		V6Seed:    e.v6.seed,
		V6Tree:    e.v6.tree,
	}
	for k := range numKinds {
		c.Kind[k] = gen.FastdropFdBm{W: e.cls.kind[k]}
	}
	copy(c.Crule[:], e.cls.vals)
	if len(e.cls.vals) <= 64 {
		for i, v := range e.cls.vals {
			c.CruleH[ctzHash(i)] = v
		}
	}
	c.Noff6 = uint32(len(e.cls.off6))
	for i, o := range e.cls.off6 {
		if o.dst {
			c.Off6Dst |= 1 << i
		}
	}
	c.Ncompound = uint32(len(e.cls.vals))
	c.LateFrom = uint32(e.cls.lateFrom)
	c.Ban4, c.Ban6 = packLens(e.pol.lens4), packLens(e.pol.lens6)
	e.dst.conf(&c)
	c.Features = features(&c)
	return c
}

// features is fd_conf.features for c: what of c needs the program's full
// path. With none, frames take the plain path, which has no code for them
// (bpf/fastdrop.c, fd_run).
func features(c *gen.FastdropFdConf) uint32 {
	var f uint32
	if c.Fields&^uint32(gen.FastdropFdLayoutFD_FLD_PLAIN) != 0 {
		f |= uint32(gen.FastdropFdLayoutFD_FEAT_FIELDS)
	}
	for _, v := range c.Crule[:c.Ncompound] {
		if v&actLimitVal != 0 { // bit 31, as fd_decide_in tests it
			f |= uint32(gen.FastdropFdLayoutFD_FEAT_LIMIT)
		}
	}
	if c.Ban4 != 0 || c.Ban6 != 0 {
		f |= uint32(gen.FastdropFdLayoutFD_FEAT_BANS)
	}
	// Late rules come after the prefix rules: with none, they are
	// judged as any other compound rule.
	if c.LateFrom < c.Ncompound && c.V4Count+c.V6Count+c.D4Count+c.D6Count != 0 {
		f |= uint32(gen.FastdropFdLayoutFD_FEAT_LATE)
	}
	if c.D4Count+c.D6Count != 0 {
		f |= uint32(gen.FastdropFdLayoutFD_FEAT_DST)
	}
	return f
}

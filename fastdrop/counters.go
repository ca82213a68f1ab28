package fastdrop

import (
	"fmt"
	"slices"

	"github.com/xdpdrop/xdpdrop/gen"
)

// Counter is a number of frames and their bytes (from the Ethernet header
// to the end of the frame).
type Counter struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

func (c *Counter) add(o Counter) {
	c.Packets += o.Packets
	c.Bytes += o.Bytes
}

// RuleCounter is what one rule of the rule set has matched since it was
// added. A rule keeps its counters while other rules change; replacing a
// rule by a different one starts the new rule at zero.
type RuleCounter struct {
	Index int  `json:"index"` // position in Engine.RuleSet().Rules
	Rule  Rule `json:"-"`
	Counter
	// Limit, for a limit rule, splits Counter into what passed and what
	// was dropped.
	Limit *LimitCounter `json:"limit,omitempty"`
}

// Counters are the engine's counters, summed over the CPUs.
type Counters struct {
	// Rules is in rule-set order, one per rule.
	Rules []RuleCounter `json:"rules"`
	// Drop and Pass count frames by the verdict they got, whatever
	// decided it, since the program was loaded (rules since removed
	// included).
	Drop Counter `json:"drop"`
	Pass Counter `json:"pass"`
	// Redirect counts frames whose action was redirect (handed to a
	// socket, or to the stack where none was bound: see QueueCounters).
	Redirect Counter `json:"redirect"`
	// Malformed counts frames the parser rejected (they got the
	// malformed verdict and are also in Drop or Pass).
	Malformed Counter `json:"malformed"`
	// Default counts frames that no rule matched (they got the policy).
	Default Counter `json:"default"`
	// Banned counts frames dropped because their source was banned
	// (also in Drop).
	Banned Counter `json:"banned"`
}

// counterPair is struct counter.
type counterPair struct {
	Packets, Bytes uint64
}

// Counters sums the per-CPU counters. Rules are in the order of
// Engine.RuleSet().
func (e *Engine) Counters() (*Counters, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.refreshLocked(); err != nil {
		return nil, err
	}
	sums, err := e.sumSlots()
	if err != nil {
		return nil, err
	}
	c := &Counters{Rules: make([]RuleCounter, len(e.rules))}
	get := func(slot uint32) Counter { return Counter(sums[slot]) }
	// Every frame is counted once, in a slot whose action is known.
	verdict := func(a Action, n Counter) {
		switch a {
		case ActionDrop:
			c.Drop.add(n)
		case ActionPass:
			c.Pass.add(n)
		case ActionRedirect:
			c.Redirect.add(n)
		}
	}
	var pc []gen.FastdropFdPcnt
	if len(e.pol.of) > 0 || get(slotRetired+uint32(ActionLimit)).Packets > 0 {
		if pc, err = e.pcntSums(); err != nil {
			return nil, err
		}
	}
	for i := range e.rules {
		n := get(e.slots[i])
		c.Rules[i] = RuleCounter{Index: i, Rule: e.rules[i], Counter: n}
		if e.rules[i].Action == ActionLimit {
			l := split(n, pc[e.pol.of[e.slots[i]]])
			c.Rules[i].Limit = &l
			c.Pass.add(l.Conform)
			c.Drop.add(l.Exceed)
			continue
		}
		verdict(e.rules[i].Action, n)
	}
	if pc != nil { // removed limit rules
		l := split(get(slotRetired+uint32(ActionLimit)), pc[0])
		c.Pass.add(l.Conform)
		c.Drop.add(l.Exceed)
	}
	c.Banned = get(slotBanned)
	c.Drop.add(c.Banned)
	for a := ActionDrop; a <= ActionRedirect; a++ {
		c.Malformed.add(get(slotMalform + uint32(a)))
		c.Default.add(get(slotDefault + uint32(a)))
		verdict(a, get(slotMalform+uint32(a)))
		verdict(a, get(slotDefault+uint32(a)))
		verdict(a, get(slotRetired+uint32(a)))
	}
	return c, nil
}

// sumSlots reads the counters of every slot in use (those below
// nextSlot: slots above it have never had a rule), summed over the CPUs.
func (e *Engine) sumSlots() ([]counterPair, error) {
	used := max(int(e.nextSlot), int(firstRule))
	n := used * counterSize
	buf := make([]byte, n)
	sums := make([]counterPair, used)
	for cpu := range e.ncpu {
		if _, err := e.mem.counters.ReadAt(buf, int64(cpu*e.nslots*counterSize)); err != nil {
			return nil, fmt.Errorf("read counters: %w", err)
		}
		for i, c := range counterSlice(buf) {
			sums[i].Packets += c.Packets
			sums[i].Bytes += c.Bytes
		}
	}
	return sums, nil
}

// zeroSlots clears the counters of slots (not in use by any packet), a
// run of consecutive slots at a time.
func (e *Engine) zeroSlots(slots []uint32) error {
	slots = slices.Clone(slots)
	slices.Sort(slots)
	var zero []byte
	for i := 0; i < len(slots); {
		j := i + 1
		for j < len(slots) && slots[j] == slots[j-1]+1 {
			j++
		}
		n := (j - i) * counterSize
		if len(zero) < n {
			zero = make([]byte, n)
		}
		for cpu := range e.ncpu {
			if _, err := e.mem.counters.WriteAt(zero[:n], int64((cpu*e.nslots+int(slots[i]))*counterSize)); err != nil {
				return fmt.Errorf("clear counters: %w", err)
			}
		}
		i = j
	}
	return nil
}

// retireSlots adds the counters of the slots of removed rules, which no
// program run uses any more, to the retired counters of their actions,
// so the per-verdict counts keep them. CPU by CPU, as the program would.
func (e *Engine) retireSlots(slots []uint32, actions []Action) error {
	var b, r [counterSize]byte
	for i, s := range slots {
		var total Counter
		for cpu := range e.ncpu {
			off := int64((cpu*e.nslots + int(s)) * counterSize)
			roff := int64((cpu*e.nslots + int(slotRetired+uint32(actions[i]))) * counterSize)
			if _, err := e.mem.counters.ReadAt(b[:], off); err != nil {
				return fmt.Errorf("read counters: %w", err)
			}
			if _, err := e.mem.counters.ReadAt(r[:], roff); err != nil {
				return fmt.Errorf("read counters: %w", err)
			}
			from, to := counterSlice(b[:]), counterSlice(r[:])
			to[0].Packets += from[0].Packets
			to[0].Bytes += from[0].Bytes
			total.add(Counter(from[0]))
			if _, err := e.mem.counters.WriteAt(r[:], roff); err != nil {
				return fmt.Errorf("write counters: %w", err)
			}
		}
		if e.retireHook != nil {
			e.retireHook(s, total)
		}
	}
	return nil
}

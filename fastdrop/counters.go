package fastdrop

import (
	"fmt"
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
}

// Counters are the engine's counters, summed over the CPUs.
type Counters struct {
	// Rules is in rule-set order, one per rule.
	Rules []RuleCounter `json:"rules"`
	// Verdicts counts frames by the verdict they got, whatever decided it.
	Drop Counter `json:"drop"`
	Pass Counter `json:"pass"`
	// Malformed counts frames the parser rejected (they got the
	// malformed verdict and are also in Drop or Pass).
	Malformed Counter `json:"malformed"`
	// Default counts frames that no rule matched (they got the policy).
	Default Counter `json:"default"`
	// Aborted counts frames the program could not evaluate (XDP_ABORTED):
	// its tables missing, which never happens once New succeeded.
	Aborted Counter `json:"aborted"`
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
	for i := range e.rules {
		c.Rules[i] = RuleCounter{Index: i, Rule: e.rules[i], Counter: get(e.slots[i])}
	}
	c.Malformed = get(slotMalform)
	c.Default = get(slotDefault)
	c.Aborted = get(slotVerdict + 0)
	c.Drop = get(slotVerdict + 1)
	c.Pass = get(slotVerdict + 2)
	return c, nil
}

// sumSlots reads the counters of every slot, summed over the CPUs.
func (e *Engine) sumSlots() ([]counterPair, error) {
	n := e.nslots * counterSize
	buf := make([]byte, n)
	sums := make([]counterPair, e.nslots)
	for cpu := range e.ncpu {
		if _, err := e.mem.counters.ReadAt(buf, int64(cpu*n)); err != nil {
			return nil, fmt.Errorf("read counters: %w", err)
		}
		for i, c := range counterSlice(buf) {
			sums[i].Packets += c.Packets
			sums[i].Bytes += c.Bytes
		}
	}
	return sums, nil
}

// zeroSlots clears the counters of slots (not in use by any packet).
func (e *Engine) zeroSlots(slots []uint32) error {
	var zero [counterSize]byte
	for _, s := range slots {
		for cpu := range e.ncpu {
			if _, err := e.mem.counters.WriteAt(zero[:], int64((cpu*e.nslots+int(s))*counterSize)); err != nil {
				return fmt.Errorf("clear counters of slot %d: %w", s, err)
			}
		}
	}
	return nil
}

package fastdrop

import "slices"

// RuleSlots returns the rule set in force and, for each rule (same
// index), the counter slot that counts it: the number the program reports
// for the rule that decided a frame (a capture's samples carry it, and a
// capture selects a rule by it). A rule keeps its slot while it stays in
// the rule set.
func (e *Engine) RuleSlots() (*RuleSet, []uint32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.refreshLocked(); err != nil {
		return nil, nil, err
	}
	return &RuleSet{Rules: slices.Clone(e.rules), Policy: e.policy, Malformed: e.malformed}, slices.Clone(e.slots), nil
}

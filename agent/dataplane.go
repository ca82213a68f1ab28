package agent

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/xdpdrop/xdpdrop/dropctl"
	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/loader"
)

// dataplane puts the rules of one origin in force on an interface,
// atomically, leaving the rules of every other origin (xdpdrop drop's and
// rules add's, xdpdrop redirect's, the agent's other origin) as they are;
// rs.Policy and rs.Malformed, where not zero, become the interface's. It
// returns a *collisionError, and changes nothing, when prefix rules of
// rs are already prefix rules of another origin (one prefix table holds
// every origin's). The kernel one is kernelPlane; tests of the reconcile
// logic use a fake.
type dataplane interface {
	apply(ic InterfaceConfig, origin string, rs *fastdrop.RuleSet) (applied, error)
}

// applied says what apply did.
type applied struct {
	Mode     string // the mode the program runs in
	Attached bool   // attached now (false: the rules of an attachment replaced)
	Reloaded bool   // loaded again with bigger tables
	Policy   string // the interface's policy/malformed now
	Noop     bool   // nothing to change: no swap
}

// collisionError is a rule set of which some prefix rules are prefix
// rules of another origin already: refused (by index into the rule set)
// with the reason. Nothing was changed.
type collisionError struct {
	refused map[int]string
}

func (e *collisionError) Error() string {
	for _, why := range e.refused {
		return fmt.Sprintf("%d prefix rules are another origin's already (%s)", len(e.refused), why)
	}
	return "prefix rules of another origin"
}

// collisions finds the prefix rules of rs that are prefix rules of
// another origin on eng, after a change failed with
// fastdrop.ErrDuplicatePrefix (the slow path: it reads every rule).
func collisions(eng *fastdrop.Engine, iface, origin string, rs *fastdrop.RuleSet) (map[int]string, error) {
	cur, err := eng.RuleSet()
	if err != nil {
		return nil, err
	}
	held := map[fastdrop.PrefixKey]string{}
	for i := range cur.Rules {
		if r := &cur.Rules[i]; r.Origin != origin && r.IsPrefixOnly() {
			held[r.PrefixKey()] = r.Origin
		}
	}
	out := map[int]string{}
	for i := range rs.Rules {
		if r := &rs.Rules[i]; r.IsPrefixOnly() {
			if o, ok := held[r.PrefixKey()]; ok {
				out[i] = fmt.Sprintf("prefix %s on %s is a rule of origin %s already (%s): one prefix table holds every origin's rules", r.PrefixKey(), iface, fastdrop.OriginName(o), originWho(o))
			}
		}
	}
	return out, nil
}

// originWho says which command or source an origin's rules come from.
func originWho(origin string) string {
	switch {
	case origin == "":
		return "xdpdrop drop or rules add"
	case origin == OriginFiles:
		return "the agent's rule files"
	case origin == OriginFlowSpec:
		return "the agent's FlowSpec routes"
	case origin == fastdrop.OriginRedirect || strings.HasPrefix(origin, fastdrop.OriginRedirect+":"):
		return "xdpdrop redirect"
	}
	return "added with --origin " + origin
}

// kernelPlane applies rule sets through packages loader, dropctl and
// fastdrop, as xdpdrop drop does, holding the interface's lock for each
// swap so that it never races another xdpdrop command.
//
// It keeps each interface's engine open between swaps: an engine opened
// afresh reads the whole prefix table back from the kernel before its
// first change (64 MiB, a fifth of a second here, seconds with a million
// prefixes), which would be the floor of every announcement's time to
// take effect. An engine notices the changes of other processes itself
// (the generation in the maps); what it cannot notice is its maps being
// replaced (a reload with bigger tables, a detach and attach), so it is
// reopened whenever the attached program is not the one it was opened
// with.
type kernelPlane struct {
	pinRoot string
	cfg     *Config

	mu      sync.Mutex
	engines map[string]*openEngine // by interface
}

// openEngine is an engine kept open, and the attached program it is for.
type openEngine struct {
	eng  *fastdrop.Engine
	prog ebpf.ProgramID
}

func (k *kernelPlane) apply(ic InterfaceConfig, origin string, rs *fastdrop.RuleSet) (_ applied, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	lk, err := loader.LockInterface(k.pinRoot, ic.Name, k.cfg.LockTimeout)
	if err != nil {
		return applied{}, err
	}
	defer lk.Unlock()
	att, err := dropctl.OpenAttachment(ic.Name, k.pinRoot)
	if errors.Is(err, loader.ErrStale) {
		if _, _, rerr := loader.RemoveStalePins(ic.Name, k.pinRoot); rerr != nil {
			return applied{}, rerr
		}
		att, err = dropctl.OpenAttachment(ic.Name, k.pinRoot)
	}
	switch {
	case err == nil:
		defer att.Close()
		oe, err := k.engine(att)
		if err != nil {
			return applied{}, err
		}
		res := applied{Mode: att.Mode().String()}
		if len(rs.Rules) == 0 && rs.Policy == 0 && rs.Malformed == 0 {
			// Nothing to put in force: no swap (with a million rules of
			// other origins, a swap costs seconds) unless origin has rules.
			if cur, err := oe.eng.OriginRules(origin); err == nil && len(cur) == 0 {
				res.Policy, res.Noop = enginePolicy(oe.eng), true
				return res, nil
			}
		}
		// One swap: ApplyOrigin adds and deletes only the rules that
		// changed (a BGP batch costs what its routes cost, not what a
		// million file rules of the other origin would), atomically.
		res.Reloaded, err = dropctl.ApplyOrigin(att, oe.eng, origin, rs)
		switch {
		case res.Reloaded: // ApplyOrigin closed the engine: another program runs now
			delete(k.engines, ic.Name)
		case errors.Is(err, fastdrop.ErrDuplicatePrefix):
			refused, cerr := collisions(oe.eng, ic.Name, origin, rs)
			if cerr == nil && len(refused) > 0 {
				return res, &collisionError{refused: refused}
			}
			k.forget(ic.Name)
		case err != nil: // open afresh next time
			k.forget(ic.Name)
		default:
			res.Policy = enginePolicy(oe.eng)
		}
		return res, err // reloaded: Policy "" (the engine is closed), the agent keeps what it knew
	case !errors.Is(err, loader.ErrNotPinned):
		return applied{}, err
	}
	k.forget(ic.Name)
	mode, _ := loader.ParseMode(ic.Mode) // checked with the config
	whole := &fastdrop.RuleSet{Rules: make([]fastdrop.Rule, len(rs.Rules)), Policy: rs.Policy, Malformed: rs.Malformed}
	for i, r := range rs.Rules {
		r.Origin = origin
		whole.Rules[i] = r
	}
	// With the destination prefix table where FlowSpec rules go: the
	// first destination-only route (a victim) then needs no reload.
	att, err = dropctl.AttachDst(whole, loader.Options{
		Interface: ic.Name,
		Mode:      mode,
		Pin:       true,
		PinRoot:   k.pinRoot,
		Force:     ic.Force,
		Config:    map[string]string{"by": "agent"},
	}, k.cfg.appliesFlowSpec(ic.Name))
	if err != nil {
		if errors.Is(err, loader.ErrForeign) || errors.Is(err, loader.ErrAlreadyAttached) {
			return applied{}, fmt.Errorf("%w, or replace it: set force: true for %s in the agent config", err, ic.Name)
		}
		return applied{}, err
	}
	defer att.Close()
	return applied{Mode: att.Mode().String(), Attached: true, Policy: policyText(whole)}, nil
}

// originRules returns the rules of origin in force on ic's interface
// (none if nothing is attached there), keeping the engine open for the
// swaps to come.
func (k *kernelPlane) originRules(ic InterfaceConfig, origin string) ([]fastdrop.Rule, error) {
	return k.rulesOf(ic, func(eng *fastdrop.Engine) ([]fastdrop.Rule, error) { return eng.OriginRules(origin) })
}

// rulesOf returns what f reads from the engine of ic's interface, under
// the interface's lock (nothing if nothing is attached there), keeping
// the engine open for the swaps to come.
func (k *kernelPlane) rulesOf(ic InterfaceConfig, f func(*fastdrop.Engine) ([]fastdrop.Rule, error)) ([]fastdrop.Rule, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	lk, err := loader.LockInterface(k.pinRoot, ic.Name, k.cfg.LockTimeout)
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	att, err := dropctl.OpenAttachment(ic.Name, k.pinRoot)
	if errors.Is(err, loader.ErrNotPinned) || errors.Is(err, loader.ErrStale) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer att.Close()
	oe, err := k.engine(att)
	if err != nil {
		return nil, err
	}
	return f(oe.eng)
}

// enginePolicy is the policy/malformed of the rule set in force.
func enginePolicy(eng *fastdrop.Engine) string {
	p, m, err := eng.Policy()
	if err != nil {
		return ""
	}
	return p.String() + "/" + m.String()
}

// engine returns the open engine of att's interface, opening it if none
// is open or the one open is for another program.
func (k *kernelPlane) engine(att *loader.Attachment) (*openEngine, error) {
	var id ebpf.ProgramID
	if p := att.Program(); p != nil {
		if info, err := p.Info(); err == nil {
			id, _ = info.ID()
		}
	}
	name := att.Interface()
	if oe := k.engines[name]; oe != nil && id != 0 && oe.prog == id {
		return oe, nil
	}
	k.forget(name)
	eng, err := dropctl.OpenEngine(att)
	if err != nil {
		return nil, err
	}
	oe := &openEngine{eng: eng, prog: id}
	if id != 0 {
		if k.engines == nil {
			k.engines = map[string]*openEngine{}
		}
		k.engines[name] = oe
	}
	return oe, nil
}

// forget closes the engine kept open for iface, if any.
func (k *kernelPlane) forget(iface string) {
	if oe := k.engines[iface]; oe != nil {
		oe.eng.Close()
		delete(k.engines, iface)
	}
}

// close closes every engine kept open (the rules stay in force).
func (k *kernelPlane) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for name := range k.engines {
		k.forget(name)
	}
}

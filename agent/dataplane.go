package agent

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/xdpdrop/xdpdrop/dropctl"
	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/loader"
)

// dataplane puts a whole rule set in force on an interface, atomically.
// The kernel one is kernelPlane; tests of the reconcile logic use a fake.
type dataplane interface {
	apply(ic InterfaceConfig, rs *fastdrop.RuleSet) (applied, error)
}

// applied says what apply did.
type applied struct {
	Mode     string // the mode the program runs in
	Attached bool   // attached now (false: the rules of an attachment replaced)
	Reloaded bool   // loaded again with bigger tables
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

func (k *kernelPlane) apply(ic InterfaceConfig, rs *fastdrop.RuleSet) (_ applied, err error) {
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
		reloaded, err := dropctl.ReloadIfFull(att, oe.eng, oe.eng.Apply(rs), func() (*fastdrop.RuleSet, error) { return rs, nil })
		switch {
		case reloaded: // ReloadIfFull closed the engine: another program runs now
			delete(k.engines, ic.Name)
		case err != nil: // open afresh next time
			k.forget(ic.Name)
		}
		return applied{Mode: att.Mode().String(), Reloaded: reloaded}, err
	case !errors.Is(err, loader.ErrNotPinned):
		return applied{}, err
	}
	k.forget(ic.Name)
	mode, _ := loader.ParseMode(ic.Mode) // checked with the config
	att, err = dropctl.Attach(rs, loader.Options{
		Interface: ic.Name,
		Mode:      mode,
		Pin:       true,
		PinRoot:   k.pinRoot,
		Force:     ic.Force,
		Config:    map[string]string{"by": "agent"},
	})
	if err != nil {
		if errors.Is(err, loader.ErrForeign) || errors.Is(err, loader.ErrAlreadyAttached) {
			return applied{}, fmt.Errorf("%w, or replace it: set force: true for %s in the agent config", err, ic.Name)
		}
		return applied{}, err
	}
	defer att.Close()
	return applied{Mode: att.Mode().String(), Attached: true}, nil
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

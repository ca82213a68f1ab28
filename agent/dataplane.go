package agent

import (
	"errors"
	"fmt"

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

// kernelPlane applies rule sets through packages loader and fastdrop, as
// `xdpdrop drop` does, holding the interface's lock for each swap so that
// it never races another xdpdrop command. Nothing is kept open between
// swaps: another command may have replaced the program meanwhile.
type kernelPlane struct {
	pinRoot string
	cfg     *Config
}

func (k *kernelPlane) apply(ic InterfaceConfig, rs *fastdrop.RuleSet) (_ applied, err error) {
	lk, err := loader.LockInterface(k.pinRoot, ic.Name, k.cfg.LockTimeout)
	if err != nil {
		return applied{}, err
	}
	defer lk.Unlock()
	att, eng, err := dropctl.Open(ic.Name, k.pinRoot)
	if errors.Is(err, loader.ErrStale) {
		if _, _, rerr := loader.RemoveStalePins(ic.Name, k.pinRoot); rerr != nil {
			return applied{}, rerr
		}
		att, eng, err = dropctl.Open(ic.Name, k.pinRoot)
	}
	switch {
	case err == nil:
		defer att.Close()
		defer eng.Close()
		reloaded, err := dropctl.ReloadIfFull(att, eng, eng.Apply(rs), func() (*fastdrop.RuleSet, error) { return rs, nil })
		return applied{Mode: att.Mode().String(), Reloaded: reloaded}, err
	case !errors.Is(err, loader.ErrNotPinned):
		return applied{}, err
	}
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

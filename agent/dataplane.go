package agent

import (
	"errors"
	"fmt"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/loader"
)

// programFastdrop is the Config["program"] of fast-drop attachments, as
// `xdpdrop drop` writes it; the agent adopts such attachments.
const programFastdrop = "fastdrop"

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
	att, err := loader.Open(ic.Name, k.pinRoot)
	if errors.Is(err, loader.ErrStale) {
		if _, _, rerr := loader.RemoveStalePins(ic.Name, k.pinRoot); rerr != nil {
			return applied{}, rerr
		}
		att, err = loader.Open(ic.Name, k.pinRoot)
	}
	switch {
	case err == nil:
		defer att.Close()
		if p := att.Meta().Config["program"]; p != programFastdrop {
			return applied{}, fmt.Errorf("%s runs xdpdrop's %q program, not fast drop: detach it first ('xdpdrop detach --iface %s')", ic.Name, p, ic.Name)
		}
		eng, err := fastdrop.Open(att.MapsDir())
		if err != nil {
			return applied{}, err
		}
		err = eng.Apply(rs)
		if !errors.Is(err, fastdrop.ErrCapacity) {
			eng.Close()
			return applied{Mode: att.Mode().String()}, err
		}
		eng.Close()
		neng, err := fastdrop.New(fastdrop.CapacityFor(rs, 2))
		if err != nil {
			return applied{}, err
		}
		defer neng.Close()
		if err := neng.Apply(rs); err != nil {
			return applied{}, err
		}
		if err := att.ReplaceWithMaps(neng.Program(), neng.Maps()); err != nil {
			return applied{}, err
		}
		return applied{Mode: att.Mode().String(), Reloaded: true}, nil
	case !errors.Is(err, loader.ErrNotPinned):
		return applied{}, err
	}
	mode, _ := loader.ParseMode(ic.Mode) // checked with the config
	// Room for FlowSpec rules to come: at least the whole compound table.
	opts := fastdrop.CapacityFor(rs, 2)
	eng, err := fastdrop.New(opts)
	if err != nil {
		return applied{}, err
	}
	defer eng.Close()
	if err := eng.Apply(rs); err != nil {
		return applied{}, err
	}
	att, err = loader.Attach(eng.Program(), loader.Options{
		Interface: ic.Name,
		Mode:      mode,
		Pin:       true,
		PinRoot:   k.pinRoot,
		Maps:      eng.Maps(),
		Force:     ic.Force,
		Config:    map[string]string{"program": programFastdrop, "requested_mode": mode.String(), "by": "agent"},
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

package xsk

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xdpdrop/xdpdrop/gen"
)

// ErrNotRedirect is returned by OpenRedirect for a program that is not the
// redirect program.
var ErrNotRedirect = errors.New("not xdpdrop's redirect program")

// OpenRedirect reopens the maps of a redirect program that another process
// loaded (for example one found by id through loader.Status), so that its
// per-queue counters can be read while that process runs. prog is cloned:
// the caller keeps its own handle. Its Register, like everything else,
// acts on the live program.
func OpenRedirect(prog *ebpf.Program) (*Redirect, error) {
	info, err := prog.Info()
	if err != nil {
		return nil, fmt.Errorf("xsk: program info: %w", err)
	}
	if info.Name != gen.RedirectProgXskRedirect {
		return nil, fmt.Errorf("xsk: program %q: %w", info.Name, ErrNotRedirect)
	}
	ids, ok := info.MapIDs()
	if !ok {
		return nil, fmt.Errorf("xsk: program %q: the kernel does not list its maps (needs Linux 4.15+)", info.Name)
	}
	r := &Redirect{}
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("xsk: open map %d of program %q: %w", id, info.Name, err), r.Close())
		}
		mi, err := m.Info()
		if err != nil {
			m.Close()
			return nil, errors.Join(fmt.Errorf("xsk: map %d info: %w", id, err), r.Close())
		}
		switch mi.Name {
		case gen.RedirectMapQueueVerdicts:
			r.objs.QueueVerdicts = m
		case gen.RedirectMapXsks:
			r.objs.Xsks = m
		default:
			m.Close() // .rodata and the like
		}
	}
	if r.objs.QueueVerdicts == nil || r.objs.Xsks == nil {
		return nil, errors.Join(fmt.Errorf("xsk: program %q: %w (its maps are missing)", info.Name, ErrNotRedirect), r.Close())
	}
	if r.objs.XskRedirect, err = prog.Clone(); err != nil {
		return nil, errors.Join(fmt.Errorf("xsk: clone program: %w", err), r.Close())
	}
	return r, nil
}

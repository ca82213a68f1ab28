package loader

import (
	"errors"
	"fmt"
)

// Running reports whether the attachment's program still runs on its
// interface in its mode. It is false once another process detached or
// replaced it (`xdpdrop detach`, `ip link set dev IF xdp off`) or the
// interface is gone: a foreground user of a program that is not pinned
// (redirect) polls it to notice that it no longer receives anything.
func (a *Attachment) Running() (bool, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return false, fmt.Errorf("running on %s: %w", a.iface, errClosed)
	}
	mode, ifindex := a.meta.Mode, a.ifindex
	if a.runningProg != a.prog {
		info, err := a.prog.Info()
		if err != nil {
			a.mu.Unlock()
			return false, wrapErr("running on "+a.iface+": program info", err)
		}
		id, ok := info.ID()
		if !ok {
			a.mu.Unlock()
			return false, fmt.Errorf("running on %s: the kernel reports no program ID", a.iface)
		}
		a.runningProg, a.runningID = a.prog, id
	}
	id := a.runningID
	a.mu.Unlock()
	x, err := getXDP(ifindex)
	if errors.Is(err, ErrNoInterface) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("running on %s: %w", a.iface, err)
	}
	for _, p := range x.Progs {
		if uint32(id) == p.ID && p.Mode == mode {
			return true, nil
		}
	}
	return false, nil
}

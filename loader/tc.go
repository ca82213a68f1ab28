package loader

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// TCOptions say where AttachTC attaches a TC program.
type TCOptions struct {
	// Interface is the name of the interface, in the calling thread's
	// network namespace.
	Interface string
	// Egress attaches to the egress hook; the default is ingress.
	Egress bool
}

// TCAttachment is a TC program attached through tcx (a bpf_link, Linux
// 6.6 and later). It is never pinned and carries no metadata: it lives
// as long as the process holds it, which suits baselines and benchmarks
// (XDP stays the tool's business; TC is what it is compared against).
// Its methods are safe for concurrent use.
type TCAttachment struct {
	mu      sync.Mutex
	iface   string
	ifindex int
	egress  bool
	lnk     link.Link // nil once closed
}

// AttachTC attaches prog, a TC (SchedCLS) program, to the tcx ingress
// (or egress) hook of opts.Interface, alongside whatever other tcx
// programs run there. Detach with Close.
func AttachTC(prog *ebpf.Program, opts TCOptions) (*TCAttachment, error) {
	if prog == nil {
		return nil, errors.New("attach tc: nil program")
	}
	if t := prog.Type(); t != ebpf.SchedCLS {
		return nil, fmt.Errorf("attach tc: program type is %s, want %s", t, ebpf.SchedCLS)
	}
	l, err := lookupLink(opts.Interface)
	if err != nil {
		return nil, fmt.Errorf("attach tc: %w", err)
	}
	name, index := l.Attrs().Name, l.Attrs().Index
	hook, at := "ingress", ebpf.AttachTCXIngress
	if opts.Egress {
		hook, at = "egress", ebpf.AttachTCXEgress
	}
	lnk, err := link.AttachTCX(link.TCXOptions{Interface: index, Program: prog, Attach: at})
	if err != nil {
		ctx := fmt.Sprintf("attach tc to %s %s", name, hook)
		if isNotSupported(err) {
			return nil, fmt.Errorf("%s: %w (tcx needs Linux 6.6 or later)", ctx, err)
		}
		return nil, wrapErr(ctx, err)
	}
	return &TCAttachment{iface: name, ifindex: index, egress: opts.Egress, lnk: lnk}, nil
}

// Interface is the name of the interface.
func (a *TCAttachment) Interface() string { return a.iface }

// Ifindex is the interface's index.
func (a *TCAttachment) Ifindex() int { return a.ifindex }

// Egress reports whether the program runs on egress (else ingress).
func (a *TCAttachment) Egress() bool { return a.egress }

// Close detaches the program. It is idempotent.
func (a *TCAttachment) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lnk == nil {
		return nil
	}
	err := a.lnk.Close()
	a.lnk = nil
	if err != nil {
		return fmt.Errorf("detach tc from %s: %w", a.iface, err)
	}
	return nil
}

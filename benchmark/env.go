package benchmark

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/ethtool"
	"github.com/xdpdrop/xdpdrop/sandbox"
)

// Pair names an existing pair of interfaces to measure on instead of a
// fresh veth pair per case. Both ends must be free of XDP programs; what
// a case attaches or changes (GRO, NAPI settings) is undone when it ends.
type Pair struct {
	// Host is the interface under test, in the caller's network
	// namespace: the drop programs and the receiving AF_XDP sockets run
	// on it.
	Host string
	// Peer is the other end: the generator sends from it, the txonly
	// socket sends from it, and frames sent back (l2fwd) are counted on
	// it by a native XDP program.
	Peer string
	// PeerNetNS is the named network namespace (ip netns) of Peer, ""
	// for the caller's.
	PeerNetNS string
}

// env is the pair of interfaces one case runs on, and what to undo.
type env struct {
	host, peer       string
	hostIdx, peerIdx int
	hostMAC, peerMAC net.HardwareAddr
	peerNS           netns.NsHandle // -1: the caller's namespace
	peerNSName       string
	hostTool         *ethtool.Socket
	peerTool         *ethtool.Socket
	peerH            *netlink.Handle
	// veth is set when Peer is a veth end: its counters then say how many
	// frames the generator put into the host end's ring, and how many the
	// ring had no room for.
	veth bool
	// kernelPids are kernel threads doing the case's network work: the
	// ksoftirqd threads and NAPI threads made for it.
	kernelPids []string
	undo       []func() error
}

// newEnv makes a sandbox for c, or prepares the caller's pair.
func newEnv(pair *Pair, c Case) (e *env, err error) {
	e = &env{peerNS: -1}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.close())
			e = nil
		}
	}()
	// veth hands frames that arrive by XDP_TX from the peer (the
	// generator) to the stack only through NAPI, which a device without
	// a native XDP program uses only with GRO on.
	gro := c.Kind == DropTC || c.Kind == DropGeneric
	if pair == nil {
		box, err := sandbox.New(sandbox.Options{Prefix: "xdb", GRO: gro})
		if err != nil {
			return e, fmt.Errorf("create the sandbox: %w", err)
		}
		e.onClose(box.Close)
		e.host, e.hostIdx, e.hostMAC = box.Name, box.Index, box.MAC
		e.peer, e.peerIdx, e.peerMAC = box.Peer, box.PeerIdx, box.PeerMAC
		e.peerNSName = box.NSName
		if e.peerNS, err = netns.GetFromName(box.NSName); err != nil {
			return e, fmt.Errorf("open namespace %s: %w", box.NSName, err)
		}
		e.onClose(e.peerNS.Close)
		// Without IPv6 neither end sends frames of its own (router
		// solicitations, MLD): every counter sees only the benchmark.
		if err := disableIPv6(e.host); err != nil {
			return e, err
		}
		if err := e.inPeer(func() error { return disableIPv6(e.peer) }); err != nil {
			return e, err
		}
	} else {
		if err := e.usePair(pair, gro); err != nil {
			return e, err
		}
	}
	if e.hostTool, err = ethtool.Open(); err != nil {
		return e, err
	}
	e.onClose(e.hostTool.Close)
	if err := e.inPeer(func() error {
		var err error
		e.peerTool, err = ethtool.Open()
		return err
	}); err != nil {
		return e, err
	}
	e.onClose(e.peerTool.Close)
	if e.peerNS >= 0 {
		if e.peerH, err = netlink.NewHandleAt(e.peerNS); err != nil {
			return e, fmt.Errorf("netlink in namespace %s: %w", e.peerNSName, err)
		}
		e.onClose(func() error { e.peerH.Close(); return nil })
	} else {
		e.peerH = &netlink.Handle{}
	}
	drv, _, err := e.peerTool.Driver(e.peer)
	if err != nil {
		return e, err
	}
	e.veth = drv == "veth"
	e.kernelPids = ksoftirqds()
	return e, nil
}

func (e *env) usePair(p *Pair, gro bool) error {
	if p.Host == "" || p.Peer == "" {
		return errors.New("benchmark: a pair needs both interface names")
	}
	hl, err := netlink.LinkByName(p.Host)
	if err != nil {
		return fmt.Errorf("interface %q: %w (list interfaces with 'ip link')", p.Host, err)
	}
	e.host, e.hostIdx, e.hostMAC = p.Host, hl.Attrs().Index, hl.Attrs().HardwareAddr
	e.peerNSName = p.PeerNetNS
	if p.PeerNetNS != "" {
		if e.peerNS, err = netns.GetFromName(p.PeerNetNS); err != nil {
			return fmt.Errorf("network namespace %q: %w (list them with 'ip netns')", p.PeerNetNS, err)
		}
		e.onClose(e.peerNS.Close)
	}
	if err := e.inPeer(func() error {
		pl, err := netlink.LinkByName(p.Peer)
		if err != nil {
			return fmt.Errorf("interface %q: %w (list interfaces with 'ip link'%s)", p.Peer, err, nsHint(p.PeerNetNS))
		}
		e.peer, e.peerIdx, e.peerMAC = p.Peer, pl.Attrs().Index, pl.Attrs().HardwareAddr
		return nil
	}); err != nil {
		return err
	}
	if len(e.hostMAC) != 6 || len(e.peerMAC) != 6 {
		return fmt.Errorf("benchmark: %s and %s must be Ethernet interfaces", e.host, e.peer)
	}
	if gro {
		was, err := sandbox.GRO(e.host)
		if err != nil {
			return err
		}
		if !was {
			if err := sandbox.SetGRO(e.host, true); err != nil {
				return err
			}
			e.onClose(func() error { return sandbox.SetGRO(e.host, false) })
		}
	}
	return nil
}

func nsHint(ns string) string {
	if ns == "" {
		return ""
	}
	return " -n " + ns
}

// onClose registers f to run when the case ends, before what was
// registered earlier.
func (e *env) onClose(f func() error) { e.undo = append(e.undo, f) }

// close undoes everything, last first.
func (e *env) close() error {
	var errs []error
	for i := len(e.undo) - 1; i >= 0; i-- {
		errs = append(errs, e.undo[i]())
	}
	e.undo = nil
	return errors.Join(errs...)
}

// inPeer runs fn in the peer's network namespace, on a locked thread.
func (e *env) inPeer(fn func() error) error {
	if e.peerNS < 0 {
		return fn()
	}
	return sandbox.InNS(e.peerNS, fn)
}

// offered reads the frames the peer put into the host end's rings by
// ndo_xdp_xmit (XDP_TX: the generator) and those the rings had no room
// for, from the peer's veth counters.
func (e *env) offered() (xmit, full uint64, err error) {
	st, err := e.peerTool.Stats(e.peer)
	if err != nil {
		return 0, 0, err
	}
	for k, v := range st {
		if !strings.HasPrefix(k, "tx_queue_") {
			continue
		}
		switch {
		case strings.HasSuffix(k, "_xdp_xmit"):
			xmit += v
		case strings.HasSuffix(k, "_xdp_xmit_errors"):
			full += v
		}
	}
	return xmit, full, nil
}

// txDropped reads the frames an end dropped on transmit (veth: the other
// end's ring was full).
func (e *env) txDropped(peer bool) (uint64, error) {
	var l netlink.Link
	var err error
	if peer {
		l, err = e.peerH.LinkByName(e.peer)
	} else {
		l, err = netlink.LinkByName(e.host)
	}
	if err != nil {
		return 0, fmt.Errorf("link statistics: %w", err)
	}
	if s := l.Attrs().Statistics; s != nil {
		return s.TxDropped, nil
	}
	return 0, nil
}

// threadedNAPI moves the host end's NAPI processing into kernel threads
// (/sys/class/net/IF/threaded) and pins them to cpu, so that the kernel's
// receive work runs on another CPU than the sender. It needs an XDP
// program on the host end (veth has NAPI only then).
func (e *env) threadedNAPI(cpu int) error {
	path := filepath.Join("/sys/class/net", e.host, "threaded")
	before := napiThreads()
	if err := os.WriteFile(path, []byte("1"), 0); err != nil {
		return fmt.Errorf("threaded NAPI on %s: %w", e.host, err)
	}
	e.onClose(func() error { return os.WriteFile(path, []byte("0"), 0) })
	// The threads are named napi/IF-ID, cut to 15 characters.
	prefix := "napi/" + e.host
	if len(prefix) > 15 {
		prefix = prefix[:15]
	}
	var pids []int
	for deadline := time.Now().Add(time.Second); len(pids) == 0 && time.Now().Before(deadline); {
		for pid, comm := range napiThreads() {
			if _, old := before[pid]; !old && strings.HasPrefix(comm, prefix) {
				pids = append(pids, pid)
			}
		}
		if len(pids) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if len(pids) == 0 {
		return fmt.Errorf("threaded NAPI on %s: no NAPI thread appeared", e.host)
	}
	var set unix.CPUSet
	set.Set(cpu)
	for _, pid := range pids {
		if err := unix.SchedSetaffinity(pid, &set); err != nil {
			return fmt.Errorf("pin NAPI thread %d of %s to CPU %d: %w", pid, e.host, cpu, err)
		}
		e.kernelPids = append(e.kernelPids, strconv.Itoa(pid))
	}
	return nil
}

// napiThreads lists the kernel's NAPI threads by pid.
func napiThreads() map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
		if err != nil {
			continue
		}
		if comm := strings.TrimSpace(string(b)); strings.HasPrefix(comm, "napi/") {
			out[pid] = comm
		}
	}
	return out
}

// disableIPv6 turns IPv6 off on name, in the calling thread's namespace.
func disableIPv6(name string) error {
	p := filepath.Join("/proc/sys/net/ipv6/conf", name, "disable_ipv6")
	if err := os.WriteFile(p, []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("disable IPv6 on %s: %w", name, err)
	}
	return nil
}

package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Addresses given to the two ends. 198.18.0.0/15 is reserved for network
// benchmarks (RFC 2544) and 2001:db8::/32 for documentation (RFC 3849), so
// neither can be confused with a real network.
var (
	HostAddr4 = netip.MustParsePrefix("198.18.0.1/24")
	PeerAddr4 = netip.MustParsePrefix("198.18.0.2/24")
	HostAddr6 = netip.MustParsePrefix("2001:db8::1/64")
	PeerAddr6 = netip.MustParsePrefix("2001:db8::2/64")
)

// Options shape a Pair. The zero value is one queue, GRO off, MTU 1500.
type Options struct {
	// Prefix starts the interface names (at most 4 characters, default "xd").
	Prefix string
	// Queues is the number of rx and tx queues on each end (default 1).
	Queues int
	// GRO turns GRO on at the host end. veth drops frames that arrive by
	// ndo_xdp_xmit (XDP_TX or redirect from the peer) unless the receiving
	// end has a native XDP program or GRO on (see KERNEL-NOTES.md).
	GRO bool
	// PeerGRO turns GRO on at the peer end.
	PeerGRO bool
	// MTU of both ends (default 1500).
	MTU int
}

// Pair is a veth pair with its peer end in its own network namespace.
type Pair struct {
	Name    string // host end, in the caller's namespace
	Index   int
	MAC     net.HardwareAddr
	Peer    string // peer end, in namespace NSName
	PeerIdx int
	PeerMAC net.HardwareAddr
	NSName  string
	NS      netns.NsHandle
}

// New creates a veth pair, moves its peer into a new namespace, gives both
// ends addresses and brings them up. On error it removes what it made.
func New(opts Options) (p *Pair, err error) {
	if opts.Prefix == "" {
		opts.Prefix = "xd"
	}
	if len(opts.Prefix) > 4 {
		return nil, fmt.Errorf("sandbox: prefix %q longer than 4 characters", opts.Prefix)
	}
	if opts.Queues <= 0 {
		opts.Queues = 1
	}
	if opts.MTU <= 0 {
		opts.MTU = 1500
	}
	id, err := randomID()
	if err != nil {
		return nil, err
	}
	p = &Pair{
		Name:   opts.Prefix + id + "a",
		Peer:   opts.Prefix + id + "b",
		NSName: nsName(opts.Prefix+id, os.Getpid()),
		NS:     -1,
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Close())
			p = nil
		}
	}()

	if p.NS, err = newNamedNS(p.NSName); err != nil {
		return p, err
	}
	// Held until Close or the process's end, however it ends: while it is
	// held, RemoveStale leaves the pair alone.
	if err := unix.Flock(int(p.NS), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return p, fmt.Errorf("sandbox: lock namespace %s: %w", p.NSName, err)
	}
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{
			Name:        p.Name,
			MTU:         opts.MTU,
			NumTxQueues: opts.Queues,
			NumRxQueues: opts.Queues,
		},
		PeerName:        p.Peer,
		PeerNamespace:   netlink.NsFd(int(p.NS)),
		PeerNumTxQueues: uint32(opts.Queues),
		PeerNumRxQueues: uint32(opts.Queues),
		PeerMTU:         uint32(opts.MTU),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return p, fmt.Errorf("sandbox: create veth %s/%s: %w", p.Name, p.Peer, err)
	}
	peerH, err := netlink.NewHandleAt(p.NS)
	if err != nil {
		return p, fmt.Errorf("sandbox: netlink in namespace %s: %w", p.NSName, err)
	}
	defer peerH.Close()

	if p.Index, p.MAC, err = setUp(nil, p.Name, HostAddr4, HostAddr6); err != nil {
		return p, err
	}
	if p.PeerIdx, p.PeerMAC, err = setUp(peerH, p.Peer, PeerAddr4, PeerAddr6); err != nil {
		return p, err
	}
	// Static neighbours: traffic generated in one namespace reaches the
	// other without waiting for ARP/ND.
	if err := addNeigh(nil, p.Index, PeerAddr4.Addr(), p.PeerMAC); err != nil {
		return p, err
	}
	if err := addNeigh(nil, p.Index, PeerAddr6.Addr(), p.PeerMAC); err != nil {
		return p, err
	}
	if err := addNeigh(peerH, p.PeerIdx, HostAddr4.Addr(), p.MAC); err != nil {
		return p, err
	}
	if err := addNeigh(peerH, p.PeerIdx, HostAddr6.Addr(), p.MAC); err != nil {
		return p, err
	}
	if opts.GRO {
		if err := SetGRO(p.Name, true); err != nil {
			return p, err
		}
	}
	if opts.PeerGRO {
		if err := p.InPeerNS(func() error { return SetGRO(p.Peer, true) }); err != nil {
			return p, err
		}
	}
	return p, nil
}

// InPeerNS runs fn on a locked OS thread inside the peer's namespace.
func (p *Pair) InPeerNS(fn func() error) error {
	return InNS(p.NS, fn)
}

// Close deletes the veth pair (deleting one end deletes both) and the
// namespace, by the names New gave them.
func (p *Pair) Close() error {
	var errs []error
	if l, err := netlink.LinkByName(p.Name); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("sandbox: delete %s: %w", p.Name, err))
		}
	}
	if p.NS >= 0 {
		errs = append(errs, p.NS.Close())
		p.NS = -1
		if err := netns.DeleteNamed(p.NSName); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("sandbox: delete namespace %s: %w", p.NSName, err))
		}
	}
	return errors.Join(errs...)
}

// InNS runs fn on a locked OS thread inside namespace ns and returns the
// thread to its original namespace afterwards. If the thread cannot be
// returned, it stays locked so that Go retires it instead of reusing it.
func InNS(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("sandbox: current namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("sandbox: enter namespace: %w", err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: it dies with this goroutine.
		return errors.Join(ferr, fmt.Errorf("sandbox: leave namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

func newNamedNS(name string) (netns.NsHandle, error) {
	var ns netns.NsHandle = -1
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return -1, fmt.Errorf("sandbox: current namespace: %w", err)
	}
	defer orig.Close()
	// NewNamed moves this thread into the new namespace.
	ns, err = netns.NewNamed(name)
	if err != nil {
		runtime.UnlockOSThread()
		return -1, fmt.Errorf("sandbox: create namespace %s: %w", name, err)
	}
	if err := netns.Set(orig); err != nil {
		return -1, errors.Join(fmt.Errorf("sandbox: leave namespace: %w", err), ns.Close(), netns.DeleteNamed(name))
	}
	runtime.UnlockOSThread()
	return ns, nil
}

func setUp(h *netlink.Handle, name string, a4, a6 netip.Prefix) (int, net.HardwareAddr, error) {
	if h == nil {
		h = &netlink.Handle{}
	}
	l, err := h.LinkByName(name)
	if err != nil {
		return 0, nil, fmt.Errorf("sandbox: find %s: %w", name, err)
	}
	for _, a := range []netip.Prefix{a4, a6} {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}}
		if a.Addr().Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(l, addr); err != nil {
			return 0, nil, fmt.Errorf("sandbox: address %s on %s: %w", a, name, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return 0, nil, fmt.Errorf("sandbox: bring up %s: %w", name, err)
	}
	return l.Attrs().Index, l.Attrs().HardwareAddr, nil
}

func addNeigh(h *netlink.Handle, index int, ip netip.Addr, mac net.HardwareAddr) error {
	if h == nil {
		h = &netlink.Handle{}
	}
	family := unix.AF_INET
	if ip.Is6() {
		family = unix.AF_INET6
	}
	n := &netlink.Neigh{LinkIndex: index, Family: family, State: netlink.NUD_PERMANENT, IP: ip.AsSlice(), HardwareAddr: mac}
	if err := h.NeighSet(n); err != nil {
		return fmt.Errorf("sandbox: neighbour %s: %w", ip, err)
	}
	return nil
}

func randomID() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("sandbox: random name: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

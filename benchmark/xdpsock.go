package benchmark

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
)

// xdpsock rows run the kernel's AF_XDP sample, xdpsock (from
// bpf-examples, built by the user against libxdp), on the host end of the
// row's pair, in a process of its own on the application's CPU. It
// attaches its own XDP program. What it received and dropped comes from
// its statistics (-x extra, -a system calls), parsed from its output; the
// window rates come from veth's own count of frames its program
// redirected to the socket, which xdpsock reads at once.

// xdpsockStats are the totals of xdpsock's last statistics block.
type xdpsockStats struct {
	rx, tx                   uint64
	rxDropped, rxQueueFull   uint64 // XDP_STATISTICS rx_dropped, rx_ring_full
	fillRingEmpty, txInvalid uint64
	syscalls                 uint64 // the -a counts: poll(), recvfrom() and sendto() calls
	blocks                   int    // statistics blocks seen
}

// parseXDPSock reads xdpsock's output: blocks of
//
//	 sock0@veth0:0 rxdrop xdp-drv
//	                   pps            pkts           1.00
//	rx                 5306385        26531925
//	tx                 0              0
//	rx dropped         0              0
//	...
//	                   calls/s        count
//	rx empty polls     0              12
//
// (labels in an 18-character column, then the rate and the total), and
// returns the totals of the last block (thousands separators ignored).
func parseXDPSock(out string) xdpsockStats {
	var st, cur xdpsockStats
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "sock0@") {
			if cur.blocks > 0 {
				st = cur
			}
			cur = xdpsockStats{blocks: st.blocks + 1}
			continue
		}
		if len(line) < 19 || cur.blocks == 0 {
			continue
		}
		f := strings.Fields(line[18:])
		if len(f) < 2 {
			continue
		}
		n, err := strconv.ParseUint(strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return r
			}
			return -1
		}, f[1]), 10, 64)
		if err != nil {
			continue
		}
		switch strings.TrimSpace(line[:18]) {
		case "rx":
			cur.rx = n
		case "tx":
			cur.tx = n
		case "rx dropped":
			cur.rxDropped = n
		case "rx queue full":
			cur.rxQueueFull = n
		case "fill ring empty":
			cur.fillRingEmpty = n
		case "tx invalid":
			cur.txInvalid = n
		case "rx empty polls", "fill fail polls", "copy tx sendtos", "tx wakeup sendtos", "opt polls":
			cur.syscalls += n
		}
	}
	if cur.blocks > 0 {
		st = cur
	}
	return st
}

// xdpsockArgs are xdpsock's arguments for case c on interface iface:
// queue 0, native XDP, copy mode (veth has no zero-copy; on a NIC the
// Go rows bind in copy mode where the driver has no zero-copy too, see
// Options), need_wakeup as the case says, poll() before every batch when
// Wait is WaitPoll (-p, xdpsock's poll mode) and its busy loop otherwise,
// the case's batch, extra and system-call statistics every second.
func xdpsockArgs(c Case, opts Options, iface string) []string {
	args := []string{"-i", iface, "-q", "0", "-N", "-c", "-b", strconv.Itoa(opts.Batch), "-x", "-a"}
	switch c.Kind {
	case RxDrop:
		args = append(args, "-r")
	case L2Fwd:
		args = append(args, "-l")
	}
	if !c.NeedWakeup {
		args = append(args, "-m")
	}
	if opts.Wait.String() == "poll" {
		args = append(args, "-p")
	}
	return args
}

// syncBuffer is a bytes.Buffer that a process may write while another
// goroutine reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// external is an application run by another program (xdpsock).
type external struct {
	path    string
	args    []string
	out     *syncBuffer
	running Running
}

// setupXDPSock prepares an xdpsock row: nothing is attached here (xdpsock
// attaches its own program when it starts); start runs it.
func (r *caseRun) setupXDPSock() error {
	if r.opts.XDPSock == "" {
		return errors.New("xdpsock rows need the path of an xdpsock binary")
	}
	var err error
	if r.appCPU, err = r.opts.appCPU(r.c.Placement); err != nil {
		return err
	}
	r.ext = &external{path: r.opts.XDPSock, args: xdpsockArgs(r.c, r.opts, r.env.host), out: &syncBuffer{}}
	arrived, err := r.l2fwdArrivals()
	if err != nil {
		return err
	}
	r.read = func(c *counts) error {
		st, err := r.env.hostTool.Stats(r.env.host)
		if err != nil {
			return err
		}
		for k, v := range st {
			if strings.HasPrefix(k, "rx_queue_") && strings.HasSuffix(k, "_xdp_redirect") {
				c.hook += v
				c.redirected += v
			}
		}
		x := parseXDPSock(r.ext.out.String())
		c.rxRingFull, c.rxDropped, c.txInvalid = x.rxQueueFull, x.rxDropped, x.txInvalid
		c.completed, c.appRx = x.tx, x.rx
		c.syscalls = x.syscalls
		if arrived != nil {
			return arrived(c)
		}
		return nil
	}
	return nil
}

// startExternal starts the external application on its CPU and waits
// until it runs: its XDP program is attached to the host end, or it
// printed something.
func (r *caseRun) startExternal() error {
	e := r.ext
	app := command{name: e.path, role: "application", build: func(GenJob) *exec.Cmd {
		// xdpsock's statistics go through stdio, which buffers them in a
		// pipe: stdbuf, where there is one, makes them line-buffered, so
		// that a killed xdpsock leaves its last block readable.
		cmd := exec.Command(e.path, e.args...)
		if sb, err := exec.LookPath("stdbuf"); err == nil {
			cmd = exec.Command(sb, append([]string{"-oL", e.path}, e.args...)...)
		}
		cmd.Env = append(os.Environ(), "LC_ALL=C") // no thousands separators
		cmd.Stdout = e.out
		return cmd
	}}
	running, err := app.Start(GenJob{CPU: r.appCPU})
	if err != nil {
		return err
	}
	e.running = running
	attached := func() bool {
		l, err := netlink.LinkByName(r.env.host)
		return err == nil && l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case <-running.Done():
			err := running.Stop()
			if err == nil {
				err = errors.New("it exited")
			}
			return fmt.Errorf("%s %s: %w", e.path, strings.Join(e.args, " "), err)
		default:
		}
		if attached() || e.out.String() != "" {
			// Its socket is registered right after the attach.
			time.Sleep(100 * time.Millisecond)
			return nil
		}
	}
	_ = running.Stop()
	return fmt.Errorf("application %s: nothing attached to %s within 10s", e.path, r.env.host)
}

// stopExternal stops the external application (SIGINT: xdpsock prints
// its last statistics and detaches) and waits for it. xdpsock in poll mode
// (-p) notices SIGINT only when a frame arrives, which no longer happens
// once the generator stopped: it is killed after five seconds, and its
// totals are those of its last statistics block, at most a second old;
// its program stays on the host end until the sandbox is removed (which
// is why xdpsock rows run on sandboxes only).
func (r *caseRun) stopExternal() error {
	if r.ext == nil || r.ext.running == nil {
		return nil
	}
	err := r.ext.running.Stop()
	r.ext.running = nil
	return err
}

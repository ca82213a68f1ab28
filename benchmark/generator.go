package benchmark

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/pktgen"
)

// GenJob is what a Generator sends: Frame, over and over, out of
// Interface (index Ifindex) in the named network namespace NetNS ("": the
// caller's), from CPU (-1: any), until stopped. The other fields describe
// Frame for generators that build their own copy of it (a command line).
type GenJob struct {
	NetNS     string
	Interface string
	Ifindex   int
	CPU       int
	Frame     []byte // Ethernet frame without FCS
	Batch     uint32 // frames per kernel batch

	// Frame is a UDP/IPv4 frame with these fields; Flows > 1 asks the
	// generator to vary the low 16 bits of the source address and the
	// source port over Flows values.
	SrcMAC, DstMAC   net.HardwareAddr
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	Flows            uint32
}

// A Generator sends traffic for the cases that receive (everything but
// txonly). It must send as fast as it can: the cases measure what the
// receiving side makes of it.
type Generator interface {
	// Start begins sending. It returns once the generator runs, or fails.
	Start(job GenJob) (Running, error)
	// String names the generator in reports.
	String() string
}

// Running is a started generator.
type Running interface {
	// Done is closed when the generator has stopped, by itself (an
	// error) or by Stop.
	Done() <-chan struct{}
	// Stop ends the generator and waits for it. It returns the error that
	// stopped it early, if any; stopping it is not an error.
	Stop() error
}

// InProcess returns a Generator that runs package pktgen on a goroutine of
// the calling process, on an OS thread pinned to the job's CPU.
//
// An AF_XDP consumer in the same process loses much of its rate to it:
// the generator's long system calls and the Go scheduler's hand-offs
// around the consumer's locked thread. Measure AF_XDP with a generator in
// another process (Command); the drop kinds do not mind.
func InProcess() Generator { return inProcess{} }

type inProcess struct{}

func (inProcess) String() string { return "in-process live frames (pktgen)" }

func (inProcess) Start(job GenJob) (Running, error) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &inProcessRun{cancel: cancel, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		defer close(r.done)
		// The thread changes namespace and affinity and is never given
		// back: it ends with this goroutine.
		runtime.LockOSThread()
		r.err = runGenerator(ctx, job, started)
	}()
	if err := <-started; err != nil {
		cancel()
		<-r.done
		return nil, err
	}
	return r, nil
}

// runGenerator sends job from the calling (locked) thread until ctx ends,
// reporting on started once it is about to send.
func runGenerator(ctx context.Context, job GenJob, started chan<- error) error {
	setup := func() (*pktgen.Generator, error) {
		if job.NetNS != "" {
			ns, err := netns.GetFromName(job.NetNS)
			if err != nil {
				return nil, fmt.Errorf("generator: network namespace %q: %w", job.NetNS, err)
			}
			defer ns.Close()
			if err := netns.Set(ns); err != nil {
				return nil, fmt.Errorf("generator: enter network namespace %q: %w", job.NetNS, err)
			}
		}
		if err := pinThread(job.CPU); err != nil {
			return nil, fmt.Errorf("generator: %w", err)
		}
		return pktgen.New(pktgen.Options{Flows: job.Flows, IPOffset: 14, L4Offset: 34, L4Checksum: 6})
	}
	g, err := setup()
	started <- err
	if err != nil {
		return err
	}
	defer g.Close()
	_, err = g.Run(ctx, job.Ifindex, job.Frame, pktgen.RunOptions{Batch: job.Batch})
	return err
}

type inProcessRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done is closed
}

func (r *inProcessRun) Done() <-chan struct{} { return r.done }

func (r *inProcessRun) Stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// Command returns a Generator that runs, for each job, the command that
// build returns, in a process of its own: the generator's system calls
// then cost the measured process nothing but CPU time. The process is
// started from a thread pinned to the job's CPU, so it runs there; it must
// send until it receives SIGINT and then exit with status 0. It is killed
// if the calling thread dies, and with SIGKILL if it does not end within
// five seconds of SIGINT.
//
// `xdpdrop bench` runs `xdpdrop gen` this way.
func Command(name string, build func(job GenJob) *exec.Cmd) Generator {
	return command{name: name, build: build, role: "generator"}
}

type command struct {
	name  string
	build func(GenJob) *exec.Cmd
	role  string // in errors: "generator", "application"
}

func (c command) String() string { return c.name }

func (c command) Start(job GenJob) (Running, error) {
	cmd := c.build(job)
	r := &commandRun{cmd: cmd, done: make(chan struct{}), role: c.role}
	cmd.Stderr = &r.stderr
	if err := startPinned(cmd, job.CPU); err != nil {
		return nil, fmt.Errorf("start %s %s: %w", c.role, cmd.Path, err)
	}
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	return r, nil
}

type commandRun struct {
	role    string
	cmd     *exec.Cmd
	stderr  bytes.Buffer
	done    chan struct{}
	err     error // set before done is closed
	once    sync.Once
	stopped bool
}

func (r *commandRun) Done() <-chan struct{} { return r.done }

// Pid is the generator's process id, so that its CPU time counts as the
// benchmark's own.
func (r *commandRun) Pid() int { return r.cmd.Process.Pid }

func (r *commandRun) Stop() error {
	r.once.Do(func() {
		select {
		case <-r.done:
			return // ended by itself: r.err says how
		default:
		}
		r.stopped = true
		_ = r.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-r.done:
		case <-time.After(5 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	if r.err == nil {
		return nil
	}
	var ee *exec.ExitError
	if r.stopped && errors.As(r.err, &ee) && !ee.Exited() {
		// Killed by a signal after Stop asked it to end: not a failure.
		return nil
	}
	msg := bytes.TrimSpace(r.stderr.Bytes())
	if len(msg) > 0 {
		return fmt.Errorf("%s %s: %w: %s", r.role, r.cmd.Path, r.err, msg)
	}
	return fmt.Errorf("%s %s: %w", r.role, r.cmd.Path, r.err)
}

// startPinned starts cmd on cpu (-1: anywhere), killed with SIGKILL if the
// thread that started it dies; on failure nothing is left running.
func startPinned(cmd *exec.Cmd, cpu int) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	// A child inherits the affinity of the thread that forks it; that
	// thread is also the one whose death Pdeathsig watches, so it stays
	// locked to this goroutine only while forking and keeps living after.
	start := func() error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var old unix.CPUSet
		if err := unix.SchedGetaffinity(0, &old); err != nil {
			return fmt.Errorf("read CPU affinity: %w", err)
		}
		if err := pinThread(cpu); err != nil {
			return err
		}
		err := cmd.Start()
		if rerr := unix.SchedSetaffinity(0, &old); rerr != nil {
			// Leave the thread locked: it dies with the goroutine
			// rather than run others on the wrong CPU.
			runtime.LockOSThread()
			err = errors.Join(err, fmt.Errorf("restore CPU affinity: %w", rerr))
		}
		return err
	}
	if err := start(); err != nil {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return err
	}
	return nil
}

// pinThread pins the calling thread to cpu (cpu < 0: leave it alone).
func pinThread(cpu int) error {
	if cpu < 0 {
		return nil
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin thread to CPU %d: %w", cpu, err)
	}
	return nil
}

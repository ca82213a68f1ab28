package xsk

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Serving several queues of one device: one socket per queue, all
// registered with one Redirect. The CLI (xdpdrop redirect), the
// benchmarks and examples/multiqueue all set up their sockets here.

// ParseQueues reads a queue list: "0-3", "0,2,5", a mix ("0,4-7") or
// "all", which returns nil (see AllQueues). Each queue appears once, in
// the order first given.
func ParseQueues(s string) ([]int, error) {
	if s == "all" {
		return nil, nil
	}
	var out []int
	seen := map[int]bool{}
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(strings.TrimSpace(hi))
		}
		if err != nil || a < 0 || b < a || b >= MaxQueues {
			return nil, fmt.Errorf("xsk: queue list %q: %w (want queue numbers 0-%d like 0-3 or 0,2,5, or all)", s, ErrInvalidOptions, MaxQueues-1)
		}
		for q := a; q <= b; q++ {
			if !seen[q] {
				seen[q] = true
				out = append(out, q)
			}
		}
	}
	return out, nil
}

// RxQueues is the number of rx queues of interface iface (in the calling
// thread's network namespace's sysfs view).
func RxQueues(iface string) (int, error) {
	ents, err := os.ReadDir("/sys/class/net/" + iface + "/queues")
	if err != nil {
		return 0, fmt.Errorf("interface %q: %w (list interfaces with 'ip link')", iface, err)
	}
	n := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "rx-") {
			n++
		}
	}
	return n, nil
}

// AllQueues lists the rx queues of iface that the redirect program can
// serve: 0 to RxQueues-1, at most MaxQueues of them.
func AllQueues(iface string) ([]int, error) {
	n, err := RxQueues(iface)
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, min(n, MaxQueues))
	for q := 0; q < n && q < MaxQueues; q++ {
		out = append(out, q)
	}
	return out, nil
}

// QueueOptions shape OpenQueues.
type QueueOptions struct {
	// Socket is the template of every socket; Queue is set to each queue
	// in turn and, with SharedUMEM, UMEM to the shared one.
	Socket Options
	// SharedUMEM makes one UMEM for all the sockets (XDP_SHARED_UMEM):
	// Socket.UMEMOptions' frame size, and Socket.Frames (default
	// FillSize+TxSize, FillSize if RxOnly) frames for each socket.
	// Otherwise each socket gets a private UMEM from Socket.UMEMOptions.
	SharedUMEM bool
}

// Queues are the sockets OpenQueues opened, one per queue in the order
// asked for, and the UMEM they share (nil unless QueueOptions.SharedUMEM).
type Queues struct {
	Sockets []*Socket
	UMEM    *UMEM
}

// SocketRegistry is where OpenQueues registers the sockets it opens: a
// Redirect, or the fast-drop engine's XSKMAP through RegisterFunc.
type SocketRegistry interface {
	Register(s *Socket) error
}

// RegisterFunc is a SocketRegistry that registers a socket by its queue
// and file descriptor, as fastdrop.Engine.RegisterSocket does:
// xsk.RegisterFunc(engine.RegisterSocket).
type RegisterFunc func(queue, fd int) error

// Register registers s by its queue and file descriptor.
func (f RegisterFunc) Register(s *Socket) error { return f(s.Queue(), s.Fd()) }

// OpenQueues opens one socket per queue of opts.Socket's device and
// registers each with red, whose program is (or will be) attached to that
// device. An error names the queue it happened on; whatever was opened
// before it is closed again.
func OpenQueues(red SocketRegistry, queues []int, opts QueueOptions) (q *Queues, err error) {
	if len(queues) == 0 {
		return nil, fmt.Errorf("xsk: open queues: %w (no queues)", ErrInvalidOptions)
	}
	q = &Queues{Sockets: make([]*Socket, 0, len(queues))}
	defer func() {
		if err != nil {
			err = errors.Join(err, q.Close())
			q = nil
		}
	}()
	if opts.SharedUMEM {
		frames := opts.Socket.Frames
		if frames == 0 {
			frames = ringOrDefault(opts.Socket.FillSize)
			if !opts.Socket.RxOnly {
				frames += ringOrDefault(opts.Socket.TxSize)
			}
		}
		uo := opts.Socket.UMEMOptions
		uo.FrameCount = frames * len(queues)
		if q.UMEM, err = NewUMEM(uo); err != nil {
			return q, err
		}
	}
	for _, queue := range queues {
		o := opts.Socket
		o.Queue = queue
		if q.UMEM != nil {
			o.UMEM = q.UMEM
		}
		s, err := Open(o)
		if err != nil {
			return q, fmt.Errorf("queue %d: %w", queue, err)
		}
		q.Sockets = append(q.Sockets, s)
		if err := red.Register(s); err != nil {
			return q, fmt.Errorf("queue %d: %w", queue, err)
		}
	}
	return q, nil
}

func ringOrDefault(n int) int {
	if n == 0 {
		return DefaultRingSize
	}
	return n
}

// Close closes the sockets, then the shared UMEM. Their slots in the
// redirect program's XSKMAP empty as the sockets close.
func (q *Queues) Close() error {
	var err error
	for _, s := range q.Sockets {
		err = errors.Join(err, s.Close())
	}
	if q.UMEM != nil {
		err = errors.Join(err, q.UMEM.Close())
	}
	return err
}

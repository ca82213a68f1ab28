package fastdrop

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/xdpdrop/xdpdrop/gen"
)

// The program hands a frame whose action is redirect to the AF_XDP socket
// bound to its rx queue, through an XSKMAP (fd_xsks) that is pinned with
// the other maps: any process that opens the engine (Open) can register
// its sockets there, and a program loaded again with bigger tables keeps
// them (Options.SocketMaps).

// ErrQueue is wrapped by RegisterSocket for a queue the program cannot
// serve.
var ErrQueue = errors.New("rx queue out of range")

// RegisterSocket puts the AF_XDP socket fd into the slot of rx queue
// queue: the frames of that queue that the rules redirect go to it. A
// socket registered there before is replaced. The slot empties by itself
// when the socket is closed.
func (e *Engine) RegisterSocket(queue, fd int) error {
	if queue < 0 || queue > MaxQueue {
		return fmt.Errorf("fastdrop: register a socket of queue %d: %w (0 to %d)", queue, ErrQueue, MaxQueue)
	}
	if err := e.maps[gen.FastdropMapFdXsks].Put(uint32(queue), uint32(fd)); err != nil {
		return fmt.Errorf("fastdrop: register the socket of queue %d: %w", queue, err)
	}
	return nil
}

// UnregisterSocket empties the socket slot of rx queue queue: its frames
// that the rules redirect go to the kernel stack.
func (e *Engine) UnregisterSocket(queue int) error {
	if queue < 0 || queue > MaxQueue {
		return nil
	}
	if err := e.maps[gen.FastdropMapFdXsks].Delete(uint32(queue)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("fastdrop: unregister the socket of queue %d: %w", queue, err)
	}
	return nil
}

// QueueCounter is what became of the frames of one rx queue that a
// redirect rule (or a redirect policy) chose.
type QueueCounter struct {
	// Queue is the rx queue; MaxQueue+1 stands for every queue above.
	Queue int
	// Redirected were handed to the queue's socket.
	Redirected Counter
	// NoSocket went to the kernel stack: no socket was bound there.
	NoSocket Counter
}

// QueueCounters returns the redirect counters of the queues given, summed
// over the CPUs (all queues 0 to MaxQueue+1 when none are given).
func (e *Engine) QueueCounters(queues ...int) ([]QueueCounter, error) {
	if len(queues) == 0 {
		for q := range MaxQueue + 2 {
			queues = append(queues, q)
		}
	}
	m := e.maps[gen.FastdropMapFdXskCounters]
	nv := int(gen.FastdropFdXskVerdictFD_XSK_VERDICTS)
	out := make([]QueueCounter, 0, len(queues))
	var per []gen.FastdropCounter
	for _, q := range queues {
		if q < 0 || q > MaxQueue+1 {
			return nil, fmt.Errorf("fastdrop: counters of queue %d: %w (0 to %d)", q, ErrQueue, MaxQueue+1)
		}
		qc := QueueCounter{Queue: q}
		for v, dst := range []*Counter{&qc.Redirected, &qc.NoSocket} {
			if err := m.Lookup(uint32(q*nv+v), &per); err != nil {
				return nil, fmt.Errorf("fastdrop: read the redirect counters of queue %d: %w", q, err)
			}
			for _, c := range per {
				dst.Packets += c.Packets
				dst.Bytes += c.Bytes
			}
		}
		out = append(out, qc)
	}
	return out, nil
}

// PinnedSocketMaps opens the socket maps pinned in pinDir (see Open), for
// Options.SocketMaps. The caller closes them.
func PinnedSocketMaps(pinDir string) (map[string]*ebpf.Map, error) {
	out := make(map[string]*ebpf.Map)
	for _, name := range socketMaps {
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), nil)
		if err != nil {
			for _, m := range out {
				m.Close()
			}
			return nil, fmt.Errorf("fastdrop: open pinned map %s in %s: %w", name, pinDir, err)
		}
		out[name] = m
	}
	return out, nil
}

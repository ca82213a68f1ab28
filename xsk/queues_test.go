package xsk_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdpdrop/xdpdrop/xsk"
)

func TestParseQueues(t *testing.T) {
	for in, want := range map[string][]int{
		"0":       {0},
		"0-3":     {0, 1, 2, 3},
		"0,2,5":   {0, 2, 5},
		"3,0-2,1": {3, 0, 1, 2},
		" 1 - 2 ": {1, 2},
		"63":      {63},
		"all":     nil,
	} {
		got, err := xsk.ParseQueues(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseQueues(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "64", "-1", "3-1", "x", "0,,1", "0-", "1-64"} {
		if got, err := xsk.ParseQueues(in); !errors.Is(err, xsk.ErrInvalidOptions) {
			t.Errorf("ParseQueues(%q) = %v, %v; want ErrInvalidOptions", in, got, err)
		}
	}
}

// TestOpenQueues: one socket per queue, registered, with a private or a
// shared UMEM sized for all of them; each receives its queue's frames.
// A failure part way closes what was opened and names the queue.
func TestOpenQueues(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "private", true: "shared"}[shared], func(t *testing.T) {
			e := newEnv(t, 2, xsk.RedirectOptions{})
			all, err := xsk.AllQueues(e.veth.Name)
			if err != nil || !slices.Equal(all, []int{0, 1}) {
				t.Fatalf("AllQueues(%s) = %v, %v; want [0 1]", e.veth.Name, all, err)
			}
			opts := xsk.QueueOptions{Socket: xsk.Options{Ifindex: e.veth.Index, FillSize: 1024, TxSize: 512}, SharedUMEM: shared}
			qs, err := xsk.OpenQueues(e.red, all, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := qs.Close(); err != nil {
					t.Error(err)
				}
			}()
			if len(qs.Sockets) != 2 || qs.Sockets[0].Queue() != 0 || qs.Sockets[1].Queue() != 1 {
				t.Fatalf("sockets %v", qs.Sockets)
			}
			if shared != (qs.UMEM != nil) {
				t.Fatalf("shared %v, UMEM %v", shared, qs.UMEM)
			}
			if shared && (qs.UMEM.FrameCount() != 2*1536 || qs.UMEM.Pooled() != 0) {
				t.Errorf("shared UMEM of %d frames, %d left; want 2×(1024+512), none left", qs.UMEM.FrameCount(), qs.UMEM.Pooled())
			}
			for q, s := range qs.Sockets {
				e.send(t, q, 1, e.udp(1000, 2000, q, 20))
				if got := receive(t, s, 1, 5*time.Second); len(got) != 1 {
					t.Errorf("queue %d: received %d frames, want 1", q, len(got))
				}
			}

			// A queue the pair does not have: the error names it.
			_, err = xsk.OpenQueues(e.red, []int{5}, opts)
			if err == nil || !strings.HasPrefix(err.Error(), "queue 5: ") {
				t.Errorf("OpenQueues on a missing queue: %v, want an error naming queue 5", err)
			}
		})
	}
}

func TestOpenQueuesUnwinds(t *testing.T) {
	e := newEnv(t, 1, xsk.RedirectOptions{})
	opts := xsk.QueueOptions{Socket: xsk.Options{Ifindex: e.veth.Index}}
	// Queue 0 opens, queue 3 does not exist on a one-queue pair.
	if _, err := xsk.OpenQueues(e.red, []int{0, 3}, opts); err == nil {
		t.Fatal("OpenQueues of a missing queue succeeded")
	}
	// Queue 0's socket was closed: another one binds there now.
	qs, err := xsk.OpenQueues(e.red, []int{0}, opts)
	if err != nil {
		t.Fatalf("queue 0 after the failed OpenQueues: %v", err)
	}
	if err := qs.Close(); err != nil {
		t.Error(err)
	}
	if _, err := xsk.OpenQueues(e.red, nil, opts); !errors.Is(err, xsk.ErrInvalidOptions) {
		t.Errorf("OpenQueues of no queues: %v, want ErrInvalidOptions", err)
	}
}

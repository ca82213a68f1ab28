// Command multiqueue receives on several queues of one interface, one
// AF_XDP socket per queue sharing one UMEM, and prints each queue's rate
// every second. Frames are dropped after counting (rxdrop).
//
// Needs Linux 5.11+ (preferred busy polling is optional), root, and an
// interface you own; a veth pair works in copy mode:
//
//	ip link add xa numrxqueues 4 numtxqueues 4 type veth peer name xb numrxqueues 4 numtxqueues 4
//	ip link set xa up; ip link set xb up
//	go run ./examples/multiqueue -iface xa -queues 4
//
// All traffic of the chosen queues goes to the sockets while it runs:
// frames on other queues, and on queues whose socket is gone, go to the
// kernel stack.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/xdpdrop/xdpdrop/loader"
	"github.com/xdpdrop/xdpdrop/xsk"
)

func main() {
	iface := flag.String("iface", "", "interface to receive on (required)")
	queues := flag.Int("queues", 1, "receive on queues 0..N-1")
	shared := flag.Bool("shared", true, "share one UMEM between the sockets (XDP_SHARED_UMEM)")
	flag.Parse()
	if *iface == "" || *queues < 1 || *queues > xsk.MaxQueues {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*iface, *queues, *shared); err != nil {
		log.Fatal(err)
	}
}

func run(iface string, queues int, shared bool) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	red, err := xsk.NewRedirect(xsk.RedirectOptions{})
	if err != nil {
		return err
	}
	defer red.Close()
	att, err := loader.Attach(red.Program(), loader.Options{Interface: iface})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, att.Close()) }()
	fmt.Printf("redirect program attached to %s in %v mode\n", iface, att.Mode())

	// One socket per queue, each with FillSize+TxSize (4096) frames of
	// its own or of the shared UMEM, registered with the program.
	all := make([]int, queues)
	for q := range all {
		all[q] = q
	}
	qs, err := xsk.OpenQueues(red, all, xsk.QueueOptions{Socket: xsk.Options{Interface: iface}, SharedUMEM: shared})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, qs.Close()) }()
	socks := qs.Sockets
	for q, s := range socks {
		fmt.Printf("queue %d: zero-copy %v, need_wakeup %v\n", q, s.ZeroCopy(), s.NeedWakeup())
	}

	// One goroutine drives each socket; Stats may be read from anywhere.
	var wg sync.WaitGroup
	errs := make([]error, queues)
	for q, s := range socks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[q] = xsk.RxDrop(ctx, s, xsk.ModeOptions{})
		}()
	}

	last := make([]xsk.Stats, queues)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			for q, s := range socks {
				st, err := s.Stats()
				if err != nil {
					return err
				}
				fmt.Printf("queue %d: %8.3f Mpps %8.1f Mbit/s  rx_ring_full %d  fill_empty %d\n", q,
					float64(st.RxFrames-last[q].RxFrames)/1e6, float64(st.RxBytes-last[q].RxBytes)*8/1e6,
					st.Kernel.RxRingFull-last[q].Kernel.RxRingFull,
					st.Kernel.RxFillRingEmptyDescs-last[q].Kernel.RxFillRingEmptyDescs)
				last[q] = st
			}
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

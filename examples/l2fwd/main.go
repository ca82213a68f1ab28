// Command l2fwd sends every frame arriving on one queue back out of the
// same interface with its Ethernet addresses swapped, without copying it:
// the received UMEM frame itself goes on the TX ring.
//
// Needs Linux 5.11+, root, and an interface you own (a veth pair works in
// copy mode, see examples/multiqueue):
//
//	go run ./examples/l2fwd -iface xa -queue 0
//
// Stop it with Ctrl-C; it prints what it forwarded.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/xdpdrop/xdpdrop/loader"
	"github.com/xdpdrop/xdpdrop/xsk"
)

func main() {
	iface := flag.String("iface", "", "interface (required)")
	queue := flag.Int("queue", 0, "queue to forward")
	busy := flag.Bool("busy-poll", false, "preferred busy polling (spins one CPU)")
	flag.Parse()
	if *iface == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*iface, *queue, *busy); err != nil {
		log.Fatal(err)
	}
}

func run(iface string, queue int, busy bool) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	red, err := xsk.NewRedirect(xsk.RedirectOptions{Queues: []int{queue}})
	if err != nil {
		return err
	}
	defer red.Close()
	att, err := loader.Attach(red.Program(), loader.Options{Interface: iface})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, att.Close()) }()

	opts := xsk.Options{Interface: iface, Queue: queue}
	if busy {
		opts.Wait = xsk.WaitSpin
		opts.BusyPoll = xsk.BusyPoll{Enable: true}
		if note := xsk.NAPIDeferNote(iface); note != "" {
			fmt.Println("note:", note)
		}
	}
	s, err := xsk.Open(opts)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := red.Register(s); err != nil {
		return err
	}

	start := time.Now()
	err = xsk.L2Fwd(ctx, s, xsk.ModeOptions{})
	st, serr := s.Stats()
	if serr != nil {
		return errors.Join(err, serr)
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("forwarded %d frames in %.1fs (%.3f Mpps); received %d, rx_ring_full %d, tx kicks %d\n",
		st.TxFrames, secs, float64(st.TxFrames)/secs/1e6, st.RxFrames, st.Kernel.RxRingFull, st.TxKicks)
	return err
}

// Command filter hands only DNS traffic of one queue to a Go handler: two
// fast-drop rules (redirect udp dport 53 queue Q, the same for tcp) send
// it to the queue's AF_XDP socket, and everything else goes through to the
// kernel stack (policy pass). The
// handler prints a line per query and drops it (a real resolver would
// answer by rewriting the frame and marking it xsk.Transmit).
//
// Needs Linux 5.11+, root, and an interface you own (see
// examples/multiqueue for a veth pair):
//
//	go run ./examples/filter -iface xa -queue 0
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"os/signal"
	"strings"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/loader"
	"github.com/xdpdrop/xdpdrop/xsk"
)

func main() {
	iface := flag.String("iface", "", "interface (required)")
	queue := flag.Int("queue", 0, "queue to filter")
	flag.Parse()
	if *iface == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*iface, *queue); err != nil {
		log.Fatal(err)
	}
}

func run(iface string, queue int) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	rules := fmt.Sprintf("redirect udp dport 53 queue %d\nredirect tcp dport 53 queue %d\npolicy pass\n", queue, queue)
	rs, err := fastdrop.Parse(strings.NewReader(rules), "dns.rules")
	if err != nil {
		return err
	}
	eng, err := fastdrop.New(fastdrop.CapacityFor(rs, 1))
	if err != nil {
		return err
	}
	defer eng.Close()
	if err := eng.Apply(rs); err != nil {
		return err
	}
	att, err := loader.Attach(eng.Program(), loader.Options{Interface: iface})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, att.Close()) }()

	s, err := xsk.Open(xsk.Options{Interface: iface, Queue: queue})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := eng.RegisterSocket(queue, s.Fd()); err != nil {
		return err
	}

	err = s.Run(ctx, func(frames []xsk.Frame, verdicts []xsk.Verdict) error {
		for _, f := range frames {
			src, sport, ok := source(f.Data)
			if ok {
				fmt.Printf("DNS from %v port %d, %d bytes\n", src, sport, len(f.Data))
			}
		}
		return nil // every verdict stays Release: the frames are dropped
	})
	c, cerr := eng.QueueCounters(queue)
	if cerr == nil {
		fmt.Printf("queue %d: %d redirected, %d to the stack for want of a socket\n", queue, c[0].Redirected.Packets, c[0].NoSocket.Packets)
	}
	return errors.Join(err, cerr)
}

// source reads the source address and port of an untagged IPv4 or IPv6
// TCP/UDP frame.
func source(b []byte) (netip.Addr, uint16, bool) {
	if len(b) < 14 {
		return netip.Addr{}, 0, false
	}
	switch binary.BigEndian.Uint16(b[12:14]) {
	case 0x0800:
		if len(b) < 34 {
			return netip.Addr{}, 0, false
		}
		ihl := int(b[14]&0x0f) * 4
		if len(b) < 14+ihl+4 {
			return netip.Addr{}, 0, false
		}
		return netip.AddrFrom4([4]byte(b[26:30])), binary.BigEndian.Uint16(b[14+ihl:]), true
	case 0x86dd:
		if len(b) < 14+40+4 {
			return netip.Addr{}, 0, false
		}
		return netip.AddrFrom16([16]byte(b[22:38])), binary.BigEndian.Uint16(b[54:]), true
	}
	return netip.Addr{}, 0, false
}

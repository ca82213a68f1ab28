package xsk_test

import (
	"testing"
	"time"

	"github.com/xdpdrop/xdpdrop/xsk"
)

func TestSmoke(t *testing.T) {
	e := newEnv(t, 4, xsk.RedirectOptions{})
	var socks []*xsk.Socket
	for q := range 4 {
		socks = append(socks, e.open(t, xsk.Options{Queue: q}))
	}
	t.Logf("zc=%v needwakeup=%v", socks[0].ZeroCopy(), socks[0].NeedWakeup())
	e.send(t, 0, 10, e.udp(1000, 2000, 1, 32))
	e.send(t, 1, 20, e.udp(1000, 2000, 2, 32))
	time.Sleep(100 * time.Millisecond)
	for q, s := range socks {
		got := receive(t, s, 100, 50*time.Millisecond)
		st, _ := s.Stats()
		t.Logf("queue %d: %d frames; stats %+v", q, len(got), st)
		if err := s.CheckFrames(); err != nil {
			t.Error(err)
		}
	}
	c, _ := e.red.Counters()
	for _, q := range c[:4] {
		t.Logf("%+v", q)
	}
}

package agent

import (
	"strconv"
	"testing"
	"time"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// TestSpeakerFollowsUpdates: the speaker follows the neighbour's UPDATEs
// from the watch's paths alone (no listing of the Adj-RIB-In): an
// announcement of an NLRI held already with other actions replaces it
// (implicit withdrawal), a withdrawal removes it, an announcement after a
// withdrawal brings it back, and routes of a burst all arrive.
func TestSpeakerFollowsUpdates(t *testing.T) {
	plane := &inheritPlane{}
	port := freePort(t)
	ag := runAgent(t, inheritConfig(t, port, "0s"), plane)
	eventually(t, "speaker started", 5*time.Second, ag.bgp.isStarted)
	an := newAnnouncer(t, port)
	eventually(t, "session up", 15*time.Second, func() bool {
		s := ag.Status()
		return s.BGP != nil && len(s.BGP.Neighbors) == 1 && s.BGP.Neighbors[0].Up
	})
	comps := []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8"), comp(fsProto, item("=", 17))}
	rules := func() string { s, _ := plane.flowSpecSet("test0"); return s }
	an.announce(t, flowPath(t, false, 4, comps, bgp.NewTrafficRateExtended(0, 0)))
	eventually(t, "route in force", 10*time.Second, func() bool { return rules() == "drop ether ipv4 udp dst 10.0.0.0/8" })
	an.announce(t, flowPath(t, false, 4, comps, bgp.NewTrafficRateExtended(0, 125000)))
	eventually(t, "new actions in force", 10*time.Second, func() bool { return rules() == "limit 125kbyte/s ether ipv4 udp dst 10.0.0.0/8" })
	if s := ag.Status(); s.BGP.Received != 1 {
		t.Errorf("after an implicit withdrawal: %d routes held, want 1", s.BGP.Received)
	}
	an.withdraw(t, flowPath(t, true, 4, comps, bgp.NewTrafficRateExtended(0, 125000)))
	eventually(t, "withdrawn", 10*time.Second, func() bool { return rules() == "" && ag.Status().BGP.Received == 0 })
	an.announce(t, flowPath(t, false, 4, comps, bgp.NewTrafficRateExtended(0, 0)))
	eventually(t, "announced again", 10*time.Second, func() bool { return rules() == "drop ether ipv4 udp dst 10.0.0.0/8" })
	for i := range 300 {
		an.announce(t, flowPath(t, false, 4, []bgp.FlowSpecComponentInterface{dst4("198.18." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + "/32")}, bgp.NewTrafficRateExtended(0, 0)))
	}
	eventually(t, "a burst of 300 held", 20*time.Second, func() bool { return ag.Status().BGP.Received == 301 })
}

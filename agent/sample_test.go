package agent

import (
	"strconv"
	"strings"
	"testing"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// TestTranslateSample: the traffic-action sample bit puts `sample 1/N`
// on every rule of the route (N from the config, default 1000), with any
// verdict; the verdicts themselves do not change.
func TestTranslateSample(t *testing.T) {
	sample := func(terminal bool) bgp.ExtendedCommunityInterface {
		return bgp.NewTrafficActionExtended(terminal, true)
	}
	for _, tc := range []struct {
		name string
		r    Route
		n    uint32
		want string
	}{
		{"discard", Route{4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, append(discard(), sample(false))}, 0,
			"drop ether ipv4 dst 10.0.0.0/8 sample 1/1000"},
		{"discard, N from the config", Route{4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, append(discard(), sample(false))}, 64,
			"drop ether ipv4 dst 10.0.0.0/8 sample 1/64"},
		{"discard, terminal bit", Route{4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, append(discard(), sample(true))}, 0,
			"drop ether ipv4 dst 10.0.0.0/8 sample 1/1000"},
		{"no rate: accept and sample", Route{4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, []bgp.ExtendedCommunityInterface{sample(false)}}, 0,
			"pass ether ipv4 dst 10.0.0.0/8 sample 1/1000"},
		{"limit", Route{4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, []bgp.ExtendedCommunityInterface{bgp.NewTrafficRateExtended(0, 125000), sample(false)}}, 10,
			"limit 125kbyte/s ether ipv4 dst 10.0.0.0/8 sample 1/10"},
		{"every rule of a route", Route{4, []bgp.FlowSpecComponentInterface{comp(fsTCPFlags, item("m", 0x02), item("m", 0x01))}, append(discard(), sample(false))}, 0,
			"drop ether ipv4 tcp flags syn sample 1/1000 | drop ether ipv4 tcp flags fin sample 1/1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := Translate(tc.r, TranslateOptions{SampleOneIn: tc.n})
			if err != nil {
				t.Fatal(err)
			}
			if got := texts(tr); got != tc.want {
				t.Errorf("rules %q, want %q", got, tc.want)
			}
			for _, r := range tr.Rules {
				if r.Sample == 0 || !strings.HasSuffix(r.String(), "sample 1/"+strconv.FormatUint(uint64(r.Sample), 10)) {
					t.Errorf("rule %s: Sample %d", r, r.Sample)
				}
			}
		})
	}
	// Without the bit: no modifier.
	tr, err := Translate(Route{4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, discard()}, TranslateOptions{SampleOneIn: 5})
	if err != nil || texts(tr) != "drop ether ipv4 dst 10.0.0.0/8" {
		t.Errorf("no sample bit: %q, %v", texts(tr), err)
	}
}

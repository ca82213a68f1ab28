package agent

import (
	"strings"

	bgp "github.com/osrg/gobgp/v3/pkg/packet/bgp"

	"github.com/xdpdrop/xdpdrop/fastdrop"
)

// DefaultSampleOneIn is the N of `sample 1/N` a route's traffic-action
// sample bit puts on its rules unless bgp.sample_one_in says otherwise:
// one frame in a thousand of a flood of a million frames a second is a
// thousand samples a second, about what the program's 2 MiB sample ring
// (1,024 samples of 2,048 bytes) holds for a reader polling every
// second, while a route's counters still count every frame.
const DefaultSampleOneIn = 1000

// Translate turns a route into rules, or returns an error wrapping
// ErrRefused that says why it cannot be expressed exactly.
//
// The traffic-action sample bit (RFC 8955 section 7.3: sample and log
// the traffic) becomes the sample modifier on each of the route's rules
// (docs/RULES.md), which changes no verdict. A route that asks for
// sampling alone and for evaluation to go on (terminal-action bit, no
// filtering action) is refused: a rule that samples also decides, so the
// later routes would not see the traffic, and without a rule there would
// be no sampling.
func Translate(r Route, opts TranslateOptions) (Translation, error) {
	tr, err := translate(r, opts)
	if err != nil || !sampled(r.Actions) {
		return tr, err
	}
	if len(tr.Rules) == 0 {
		return Translation{}, refusef("traffic-action sample with the terminal-action bit and no filtering action: a rule that samples also decides, so the traffic could not go on to later routes")
	}
	n := opts.SampleOneIn
	if n == 0 {
		n = DefaultSampleOneIn
	}
	for i := range tr.Rules {
		tr.Rules[i].Sample = n
		// The rule language must take it as written (as every rule of a
		// route is checked).
		text := tr.Rules[i].String()
		if _, err := fastdrop.Parse(strings.NewReader(text), "flowspec"); err != nil {
			return Translation{}, refusef("the rule language cannot say %q: %s", text, parseReason(err))
		}
	}
	return tr, nil
}

// sampled reports whether the actions have the traffic-action sample bit.
func sampled(ecs []bgp.ExtendedCommunityInterface) bool {
	for _, ec := range ecs {
		if v, ok := ec.(*bgp.TrafficActionExtended); ok && v.Sample {
			return true
		}
	}
	return false
}

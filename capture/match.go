package capture

import (
	"fmt"
	"strings"

	"github.com/xdpdrop/xdpdrop/fastdrop"
)

// Match is a filter in the rule language ("udp dport 53", "src
// 198.51.100.0/24 tcp"): a rule's fields without its action. It judges
// sampled bytes with the fast-drop model, so a frame matches exactly when
// a rule with these fields would match it.
// Not safe for concurrent use.
type Match struct {
	text    string
	model   *fastdrop.Model
	scratch []byte
}

// ParseMatch parses a filter: the fields of a rule, without its action.
func ParseMatch(text string) (*Match, error) {
	f := strings.Fields(text)
	if len(f) == 0 {
		return nil, fmt.Errorf("empty filter: give the fields of a rule, e.g. 'udp dport 53'")
	}
	if _, err := fastdrop.ParseAction(f[0]); err == nil {
		return nil, fmt.Errorf("filter %q: give the fields of a rule without its action, e.g. %q", text, strings.Join(f[1:], " "))
	}
	rs, err := fastdrop.Parse(strings.NewReader("drop "+strings.Join(f, " ")+"\n"), "--match")
	if err != nil {
		return nil, err
	}
	if len(rs.Rules) != 1 {
		return nil, fmt.Errorf("filter %q: want the fields of one rule", text)
	}
	rs.Policy, rs.Malformed = fastdrop.ActionPass, fastdrop.ActionPass
	return &Match{text: text, model: fastdrop.NewModel(rs)}, nil
}

// String returns the filter as given.
func (m *Match) String() string { return m.text }

// HeaderBytes is how many bytes of a frame Match needs to judge common
// frames (Ethernet, two VLAN tags, IPv6 with a few extension headers,
// TCP): a capture with a Match asks the program for at least this many.
const HeaderBytes = 256

// Matches reports whether the sampled frame (data, cut to its first
// bytes, of a frame length bytes long) matches. Bytes past the sample are
// taken as zero, which only the headers could change.
func (m *Match) Matches(data []byte, length int) bool {
	frame := data
	if length > len(data) {
		if cap(m.scratch) < length {
			m.scratch = make([]byte, length)
		}
		frame = m.scratch[:length]
		clear(frame[copy(frame, data):])
	}
	r := m.model.Eval(frame)
	return r.Class != fastdrop.ClassMalformed && r.Verdict == fastdrop.ActionDrop
}

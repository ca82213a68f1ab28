package fastdrop

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/xdpdrop/xdpdrop/gen"
)

// RateUnit is what a limit's rate counts.
type RateUnit uint8

const (
	// UnitPackets: frames per second ("1000/s", "10k/s").
	UnitPackets RateUnit = iota
	// UnitBits: bits per second ("100mbit/s"), policed as bytes (Rate/8).
	UnitBits
	// UnitBytes: bytes per second ("1mbyte/s").
	UnitBytes
)

// Limit is the policer of a limit rule ("limit 200/s burst 400 per src ban
// 60s icmp"): frames the rule matches pass up to Rate and are dropped above
// it, for all of them together or (PerSrc) for each source prefix
// separately. The algorithm is a token bucket of Burst (docs/RULES.md).
type Limit struct {
	// Rate is per second, in Unit: frames, bits or bytes. At least 1
	// frame/s, or 1 kbit/s (125 bytes/s).
	Rate uint64
	Unit RateUnit
	// Burst is the bucket's depth, in frames (UnitPackets) or bytes; 0 is
	// the default (DefaultBurst).
	Burst uint64
	// PerSrc: a bucket for each source prefix, /Src4Len for IPv4 and
	// /Src6Len for IPv6 (0 means 32 and 128: each address).
	PerSrc           bool
	Src4Len, Src6Len uint8
	// Ban, with PerSrc: a source that exceeds its rate is banned for Ban,
	// all its frames dropped before any rule is looked at. 0: no ban.
	Ban time.Duration
}

// Limits of the rate and ban values (the kernel's fixed-point buckets: see
// struct fd_police).
const (
	minByteRate = 125 // bytes/s: 1 kbit/s
	maxRate     = 1e13
	maxBan      = 7 * 24 * time.Hour
)

// ByteRate is the rate in bytes per second, for the units of bytes.
func (l *Limit) ByteRate() uint64 {
	if l.Unit == UnitBits {
		return l.Rate / 8
	}
	return l.Rate
}

// DefaultBurst is the burst used when Burst is 0: a tenth of a second at
// the rate, at least 1 frame, or for byte rates 16,384 bytes (a jumbo
// frame).
func (l *Limit) DefaultBurst() uint64 {
	if l.Unit == UnitPackets {
		return max(l.Rate/10, 1)
	}
	return max(l.ByteRate()/10, 16384)
}

// EffectiveBurst is Burst, or DefaultBurst if it is 0.
func (l *Limit) EffectiveBurst() uint64 {
	if l.Burst == 0 {
		return l.DefaultBurst()
	}
	return l.Burst
}

// lens returns the per-source prefix lengths for IPv4 and IPv6.
func (l *Limit) lens() (uint8, uint8) {
	l4, l6 := l.Src4Len, l.Src6Len
	if l4 == 0 {
		l4 = 32
	}
	if l6 == 0 {
		l6 = 128
	}
	return l4, l6
}

// validate checks l for the kernel's buckets; the message says what to
// write instead.
func (l *Limit) validate() error {
	switch {
	case l.Unit > UnitBytes:
		return fmt.Errorf("unknown rate unit %d", l.Unit)
	case l.Rate == 0 || l.Unit == UnitPackets && l.Rate < 1:
		return errors.New("limit rate 0 never lets anything through: use drop")
	case l.Unit != UnitPackets && l.ByteRate() < minByteRate:
		return errors.New("limit rate below 1kbit/s (125 bytes/s): write a rate of at least 1kbit/s")
	case l.Rate > maxRate:
		return errors.New("limit rate above 10^13 per second: use pass")
	case l.Burst > 1<<32-1:
		return errors.New("limit burst above 4294967295: write a smaller burst")
	case l.Src4Len > 32 || l.Src6Len > 128:
		return errors.New("per src lengths out of range (want per src/N with N 1-32 for IPv4, per src/M with M 1-128 for IPv6)")
	case !l.PerSrc && (l.Src4Len != 0 || l.Src6Len != 0):
		return errors.New("source prefix lengths without per src")
	case l.Ban < 0 || l.Ban > maxBan:
		return errors.New("ban duration out of range (want 1ms to 168h, e.g. ban 60s)")
	case l.Ban != 0 && l.Ban < time.Millisecond:
		return errors.New("ban shorter than 1ms (want e.g. ban 60s)")
	case l.Ban != 0 && !l.PerSrc:
		return errors.New("ban needs per src (a ban is of the source that exceeded its own bucket): write \"per src ban DURATION\"")
	}
	if l.Unit != UnitPackets && l.EffectiveBurst() < 64 {
		return errors.New("limit burst below 64 bytes lets no frame through: write a burst of at least one frame's bytes, e.g. burst 16kbyte")
	}
	return nil
}

// police is struct fd_police for l (the entry's tat, slot and epoch are
// the engine's).
func (l *Limit) police() (cost, burst, banNS uint64, flags uint8) {
	const unit = 1e9 * (1 << gen.FastdropFdLayoutFD_POL_TIME_SHIFT) // 1/16 ns per second
	if l.Unit == UnitPackets {
		cost = uint64(math.Round(unit / float64(l.Rate)))
		burst = cost * l.EffectiveBurst()
	} else {
		flags |= uint8(gen.FastdropFdLimFlagsFD_LIM_BYTES)
		perByte := unit * (1 << gen.FastdropFdLayoutFD_POL_BYTE_SHIFT) / float64(l.ByteRate())
		cost = uint64(math.Round(perByte))
		burst = uint64(float64(l.EffectiveBurst()) * perByte / (1 << gen.FastdropFdLayoutFD_POL_BYTE_SHIFT))
	}
	if l.PerSrc {
		flags |= uint8(gen.FastdropFdLimFlagsFD_LIM_PERSRC)
	}
	return cost, burst, uint64(l.Ban), flags
}

// rateText writes the rate in canonical syntax: the largest SI prefix that
// divides it ("100mbit/s", "1000/s" for frames: plain numbers).
func (l *Limit) rateText() string {
	switch l.Unit {
	case UnitBits:
		return siText(l.Rate) + "bit/s"
	case UnitBytes:
		return siText(l.Rate) + "byte/s"
	}
	return strconv.FormatUint(l.Rate, 10) + "/s"
}

func siText(n uint64) string {
	for _, p := range []struct {
		s string
		n uint64
	}{{"g", 1e9}, {"m", 1e6}, {"k", 1e3}} {
		if n >= p.n && n%p.n == 0 {
			return strconv.FormatUint(n/p.n, 10) + p.s
		}
	}
	return strconv.FormatUint(n, 10)
}

// String returns the limit's words of a rule in canonical syntax, after
// the action: "200/s burst 400 per src ban 1m0s".
func (l *Limit) String() string { return l.text(0) }

// text is String for a rule of family (4, 6 or 0 for both): on an IPv6
// rule, per src/M is the IPv6 length.
func (l *Limit) text(family int) string {
	var b strings.Builder
	b.WriteString(l.rateText())
	if l.Burst != 0 {
		b.WriteString(" burst ")
		if l.Unit == UnitPackets {
			b.WriteString(strconv.FormatUint(l.Burst, 10))
		} else {
			b.WriteString(siText(l.Burst) + "byte")
		}
	}
	if l.PerSrc {
		b.WriteString(" per src")
		l4, l6 := l.lens()
		switch {
		case family == 6 && l6 != 128 && l.Src4Len == 0:
			fmt.Fprintf(&b, "/%d", l6)
		case l6 != 128:
			fmt.Fprintf(&b, "/%d/%d", l4, l6)
		case l4 != 32:
			fmt.Fprintf(&b, "/%d", l4)
		}
	}
	if l.Ban != 0 {
		b.WriteString(" ban ")
		b.WriteString(durationText(l.Ban))
	}
	return b.String()
}

// durationText writes d in the largest unit that holds it whole.
func durationText(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
}

const wantRate = "want a rate like 1000/s, 10k/s, 100mbit/s or 1mbyte/s"

// ParseRate parses a limit's rate: "N/s" frames (N with an optional k, m
// or g: 10k/s), "Nbit/s" with kbit, mbit, gbit, or "Nbyte/s" with kbyte,
// mbyte, gbyte. Prefixes are decimal (k = 1000).
func ParseRate(s string) (rate uint64, unit RateUnit, err error) {
	num, per, ok := strings.Cut(s, "/")
	if !ok || per != "s" {
		return 0, 0, fmt.Errorf("rate %q: %s (per second: /s)", clipped(s), wantRate)
	}
	unit = UnitPackets
	switch {
	case strings.HasSuffix(num, "bit"):
		num, unit = strings.TrimSuffix(num, "bit"), UnitBits
	case strings.HasSuffix(num, "byte"):
		num, unit = strings.TrimSuffix(num, "byte"), UnitBytes
	}
	n, ok := parseSI(num)
	if !ok {
		return 0, 0, fmt.Errorf("rate %q: %s", clipped(s), wantRate)
	}
	return n, unit, nil
}

// parseSI parses digits with an optional k, m or g (decimal).
func parseSI(s string) (uint64, bool) {
	mul := uint64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'k':
			mul = 1e3
		case 'm':
			mul = 1e6
		case 'g':
			mul = 1e9
		}
		if mul != 1 {
			s = s[:len(s)-1]
		}
	}
	if s == "" || len(s) > 13 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > math.MaxUint64/mul {
		return 0, false
	}
	return n * mul, true
}

// parseLimitWord parses one of a limit rule's words after the rate
// ("burst N", "per src[/N[/M]]", "ban D") at toks[0], into l, and returns
// how many tokens it took; 0 if toks[0] is none of them. msg is an error.
func parseLimitWord(l *Limit, seen *[3]bool, toks []string) (n int, msg string) {
	if len(toks) == 0 {
		return 0, ""
	}
	word := toks[0]
	idx := map[string]int{"burst": 0, "per": 1, "ban": 2}[word]
	switch word {
	case "burst", "per", "ban":
	default:
		return 0, ""
	}
	if seen[idx] {
		return 0, word + " given twice (at most once per rule)"
	}
	seen[idx] = true
	if len(toks) < 2 {
		switch word {
		case "burst":
			return 0, "burst needs a size (want e.g. burst 400, or burst 64kbyte for a byte rate)"
		case "per":
			return 0, "per needs src (want per src, per src/24, or per src/24/64 for IPv4 /24 and IPv6 /64)"
		}
		return 0, "ban needs a duration (want e.g. ban 60s, ban 10m)"
	}
	v := toks[1]
	switch word {
	case "burst":
		num := strings.TrimSuffix(strings.TrimSuffix(v, "bytes"), "byte")
		b, ok := parseSI(num)
		if !ok || b == 0 {
			return 0, fmt.Sprintf("burst %q is not a size (want e.g. burst 400, or burst 64kbyte for a byte rate)", clipped(v))
		}
		l.Burst = b
		if num != v && l.Unit == UnitPackets {
			return 0, fmt.Sprintf("burst %q is in bytes, but the rate counts frames: write the burst in frames (burst 400)", clipped(v))
		}
	case "per":
		rest, ok := strings.CutPrefix(v, "src")
		if !ok || rest != "" && rest[0] != '/' {
			return 0, fmt.Sprintf("per %q: want per src, per src/24, or per src/24/64 for IPv4 /24 and IPv6 /64", clipped(v))
		}
		l.PerSrc = true
		if rest != "" {
			parts := strings.Split(rest[1:], "/")
			if len(parts) > 2 {
				return 0, fmt.Sprintf("per %q: want per src/N or per src/N/M", clipped(v))
			}
			for i, p := range parts {
				bits, ok := parseUint(p, 3)
				if !ok || bits < 1 || i == 0 && bits > 128 || i == 1 && bits > 128 {
					return 0, fmt.Sprintf("per %q: prefix length %q out of range (want 1-32 for IPv4, 1-128 for IPv6)", clipped(v), clipped(p))
				}
				if i == 0 {
					l.Src4Len = uint8(min(bits, 255))
				} else {
					l.Src6Len = uint8(bits)
				}
			}
		}
	case "ban":
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, fmt.Sprintf("ban %q is not a duration (want e.g. ban 60s, ban 10m, ban 1h)", clipped(v))
		}
		l.Ban = d
	}
	return 2, ""
}

// resolveSrcLen settles "per src/N" once the rule's family is known: on an
// IPv6 rule N is the IPv6 length.
func (l *Limit) resolveSrcLen(family int) string {
	if !l.PerSrc {
		return ""
	}
	if family == 6 && l.Src6Len == 0 && l.Src4Len != 0 {
		l.Src4Len, l.Src6Len = 0, l.Src4Len
		if l.Src6Len == 128 {
			l.Src6Len = 0
		}
		return ""
	}
	if l.Src4Len > 32 {
		return fmt.Sprintf("per src/%d: an IPv4 prefix is at most /32 (per src/N is the IPv4 length, per src/N/M gives IPv6's too; on an IPv6 rule per src/M is IPv6's)", l.Src4Len)
	}
	if l.Src4Len == 32 {
		l.Src4Len = 0
	}
	if l.Src6Len == 128 {
		l.Src6Len = 0
	}
	return ""
}

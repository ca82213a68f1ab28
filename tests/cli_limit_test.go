package tests

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type jsonLimitRule struct {
	Rule  string `json:"rule"`
	Limit *struct {
		Conform struct{ Packets uint64 } `json:"conform"`
		Exceed  struct{ Packets uint64 } `json:"exceed"`
		Bans    uint64                   `json:"bans"`
	} `json:"limit"`
}

func limitStats(t *testing.T, iface, rule string) jsonLimitRule {
	t.Helper()
	r := cli(t, "stats", "--iface", iface, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var s struct {
		Rules []jsonLimitRule `json:"rules"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
	for _, x := range s.Rules {
		if x.Rule == rule {
			require.NotNil(t, x.Limit, "limit counters of %q", rule)
			return x
		}
	}
	t.Fatalf("no rule %q in %s", rule, r.stdout)
	return jsonLimitRule{}
}

// TestCLILimitFlood: a flood far above an aggregate limit on a veth gets
// about the limit through, and stats shows what conformed and exceeded.
func TestCLILimitFlood(t *testing.T) {
	v := sandboxForCLI(t)
	// A bucket of a second: a loaded machine pauses the generator now and
	// then, and a bucket refills only to its depth meanwhile.
	const rule = "limit 2000/s burst 2000 udp dport 9"
	r := cli(t, "drop", "--iface", v.Name, "--rules", writeRules(t, rule+"\n"))
	require.Equal(t, 0, r.code, r.stderr)

	start := time.Now()
	g := cli(t, "gen", "--netns", v.NSName, "--iface", v.PeerName, "--duration", "2s", "--dport", "9", "--quiet", "--json")
	require.Equal(t, 0, g.code, g.stderr)
	took := time.Since(start).Seconds()

	l := limitStats(t, v.Name, rule)
	conform, exceed := l.Limit.Conform.Packets, l.Limit.Exceed.Packets
	t.Logf("%d conformed, %d exceeded in about %.1fs", conform, exceed, took)
	require.Greater(t, exceed, 10*conform, "the flood is more than 10x the limit")
	// 2 s of sending at 2000/s plus the burst; the sender starts and stops
	// within the time gen took.
	require.GreaterOrEqual(t, conform, uint64(0.9*2*2000), "at least the limit for the 2 s sent")
	require.LessOrEqual(t, conform, uint64(1.1*2000*took)+2000, "at most the limit for the time gen ran, plus the burst")

	// The text shows the limit table.
	r = cli(t, "stats", "--iface", v.Name)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "LIMIT RULE")
	require.Contains(t, r.stdout, rule)
}

// TestCLIBans: a source over a per-source limit with ban is banned (bans
// lists it, with --json too), its other traffic is dropped, unban lifts
// it, and rules replace keeps bans.
func TestCLIBans(t *testing.T) {
	v := sandboxForCLI(t)
	const rule = "limit 100/s burst 10 per src ban 1m udp dport 9" // canonical: ban 60s prints as 1m
	r := cli(t, "drop", "--iface", v.Name, "--rules", writeRules(t, rule+"\npass udp\n"))
	require.Equal(t, 0, r.code, r.stderr)

	r = cli(t, "bans", "--iface", v.Name)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "no bans on "+v.Name)

	send(t, v, "200", "9")
	l := limitStats(t, v.Name, rule)
	require.Equal(t, uint64(1), l.Limit.Bans, "one source banned")
	require.Equal(t, uint64(10), l.Limit.Conform.Packets, "the burst passed before the ban")

	// The rest of the flood was dropped by the ban, before the rules; and
	// so is its other traffic (which pass udp would pass).
	require.Equal(t, uint64(200-11), statsJSON(t, v.Name).verdict("banned"), "the flood after the ban")
	send(t, v, "50", "53")
	require.Equal(t, uint64(200-11+50), statsJSON(t, v.Name).verdict("banned"), "dport 53 frames dropped by the ban")

	var bans struct {
		Interface string `json:"interface"`
		Bans      []struct {
			Source  string  `json:"source"`
			Rule    string  `json:"rule"`
			Left    float64 `json:"left_seconds"`
			Dropped uint64  `json:"dropped"`
		} `json:"bans"`
	}
	r = cli(t, "bans", "--iface", v.Name, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &bans), r.stdout)
	require.Len(t, bans.Bans, 1, r.stdout)
	b := bans.Bans[0]
	require.True(t, strings.HasSuffix(b.Source, "/32"), b.Source)
	require.Equal(t, rule, b.Rule)
	require.InDelta(t, 60, b.Left, 10)
	require.Equal(t, uint64(200-11+50), b.Dropped)

	r = cli(t, "bans", "--iface", v.Name)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, b.Source)
	require.Contains(t, r.stdout, "SOURCE")

	// rules replace keeps the ban.
	r = cli(t, "rules", "replace", "--iface", v.Name, "--rules", writeRules(t, "pass udp\n"))
	require.Equal(t, 0, r.code, r.stderr)
	r = cli(t, "bans", "--iface", v.Name, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, b.Source)
	require.Contains(t, r.stdout, `"rule": ""`, "its rule is gone")

	// unban lifts it; a second unban lifts nothing and says so.
	r = cli(t, "unban", "--iface", v.Name, "all", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"lifted": [`)
	require.Contains(t, r.stdout, b.Source)
	r = cli(t, "unban", "--iface", v.Name, strings.TrimSuffix(b.Source, "/32"))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "nothing lifted")
	send(t, v, "20", "53")
	require.Equal(t, uint64(200-11+50), statsJSON(t, v.Name).verdict("banned"), "no more ban drops")

	// Bad input: a usage error.
	r = cli(t, "unban", "--iface", v.Name, "not-an-address")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "not an IPv4 or IPv6 address")
}

// TestCLIBansOutliveReload: a ban outlives a reload with bigger tables
// (the rules outgrew the first load's): the new program drops the banned
// source's frames and bans lists it, time left and frames dropped kept.
func TestCLIBansOutliveReload(t *testing.T) {
	v := sandboxForCLI(t)
	const rule = "limit 100/s burst 10 per src ban 1m udp dport 9"
	r := cli(t, "drop", "--iface", v.Name, "--rules", writeRules(t, rule+"\npass udp\n"))
	require.Equal(t, 0, r.code, r.stderr)
	send(t, v, "100", "9")
	require.Equal(t, uint64(100-11), statsJSON(t, v.Name).verdict("banned"), "banned after the burst")

	// 300 /28s in 300 /24s: more tbl8 groups than the first load made.
	var b strings.Builder
	b.WriteString(rule + "\n")
	for i := range 300 {
		fmt.Fprintf(&b, "drop src 10.%d.%d.16/28\n", 1+i/256, i%256)
	}
	b.WriteString("pass udp\n")
	r = cli(t, "drop", "--iface", v.Name, "--rules", writeRules(t, b.String()), "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"reloaded": true`)

	var bans struct {
		Bans []struct {
			Source  string  `json:"source"`
			Left    float64 `json:"left_seconds"`
			Dropped uint64  `json:"dropped"`
		} `json:"bans"`
	}
	r = cli(t, "bans", "--iface", v.Name, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &bans), r.stdout)
	require.Len(t, bans.Bans, 1, "the ban survived the reload: %s", r.stdout)
	require.InDelta(t, 60, bans.Bans[0].Left, 10)
	require.Equal(t, uint64(100-11), bans.Bans[0].Dropped)

	// The new program (its counters start from zero) drops the source's
	// frames by the ban, other ports too.
	send(t, v, "30", "53")
	require.Equal(t, uint64(30), statsJSON(t, v.Name).verdict("banned"), "the new program keeps the ban")
}

// TestCLIBanTiming: a ban starts with the frame that exceeds (every later
// frame of the flood is dropped by it) and ends within a second of its
// duration (the bounds: start within 100 ms, end within 1 s), on
// a veth, timed by the clock of this test.
func TestCLIBanTiming(t *testing.T) {
	v := sandboxForCLI(t)
	const rule = "limit 100/s burst 10 per src ban 2s udp dport 9"
	r := cli(t, "drop", "--iface", v.Name, "--rules", writeRules(t, rule+"\npass udp\n"))
	require.Equal(t, 0, r.code, r.stderr)

	// 300 frames at 1000/s: the bucket (10, refilled at 100/s) runs dry
	// within the first 15 ms.
	r = cli(t, "gen", "--netns", v.NSName, "--iface", v.PeerName, "--count", "300", "--rate", "1000", "--dport", "9", "--quiet")
	require.Equal(t, 0, r.code, r.stderr)
	sent := time.Now()
	l := limitStats(t, v.Name, rule)
	require.Equal(t, uint64(1), l.Limit.Bans)
	require.Equal(t, uint64(1), l.Limit.Exceed.Packets, "the first frame over the limit made the ban")
	conform := l.Limit.Conform.Packets
	require.Equal(t, 300-conform-1, statsJSON(t, v.Name).verdict("banned"), "every frame after it was dropped by the ban: it started at once")
	t.Logf("%d frames conformed, 1 exceeded and made the ban, %d dropped by it", conform, 300-conform-1)

	var bans struct {
		Bans []struct {
			Left float64 `json:"left_seconds"`
		} `json:"bans"`
	}
	r = cli(t, "bans", "--iface", v.Name, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &bans), r.stdout)
	require.Len(t, bans.Bans, 1, r.stdout)
	end := time.Now().Add(time.Duration(bans.Bans[0].Left * float64(time.Second)))
	require.WithinDuration(t, sent.Add(2*time.Second), end, time.Second, "the ban ends 2 s after it began")

	// One frame to a port no limit polices, every 100 ms, until one passes.
	for {
		before := statsJSON(t, v.Name).verdict("pass")
		send(t, v, "1", "53")
		at := time.Now()
		if statsJSON(t, v.Name).verdict("pass") > before {
			late := at.Sub(end)
			t.Logf("the ban ended %v after the end bans showed (%v after the flood)", late, at.Sub(sent))
			require.Less(t, late.Abs(), time.Second, "the ban ends within 1 s of its duration")
			break
		}
		require.False(t, at.After(end.Add(time.Second)), "still banned 1 s after its end")
		time.Sleep(100 * time.Millisecond)
	}
	r = cli(t, "bans", "--iface", v.Name)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "no bans on "+v.Name)
}

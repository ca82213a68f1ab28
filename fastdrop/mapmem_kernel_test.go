package fastdrop

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// mappedMapKiB sums the resident KiB of this process's mappings of BPF
// maps (named anon_inode:bpf-map in /proc/self/smaps).
func mappedMapKiB(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	total, inMap := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			inMap = strings.HasSuffix(line, "bpf-map")
		case inMap && fields[0] == "Rss:":
			n, _ := strconv.Atoi(fields[1])
			total += n
		}
	}
	return total
}

// TestEngineMapsNotMappedWhole: the engine maps the maps' memory only
// where and while it uses it. Mapped whole, fd_main alone (157 MiB) and
// the other maps counted in full in the resident set of every command
// that opened an engine, however few its rules.
func TestEngineMapsNotMappedWhole(t *testing.T) {
	rs := &RuleSet{}
	for i := range 20000 {
		rs.Rules = append(rs.Rules, Rule{Action: ActionDrop, Src: pfx("10." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ".0/24")})
	}
	rs.Rules = append(rs.Rules, Rule{Action: ActionDrop, Src: pfx("2001:db8::/32")}, Rule{Action: ActionDrop, HasProto: true, Proto: ProtoUDP, Nums: &Nums{Dport: NumRange(53, 53)}})
	before := mappedMapKiB(t)
	e := newTestEngine(t, CapacityFor(rs, 2))
	var mapBytes uint64
	for _, m := range e.Maps() {
		mapBytes += uint64(m.MaxEntries()) * uint64((m.ValueSize()+7)&^7)
	}
	if err := e.Apply(rs); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Counters(); err != nil {
		t.Fatal(err)
	}
	if mapBytes < 150<<20 {
		t.Fatalf("the maps hold %d bytes: fd_main alone should be 157 MiB", mapBytes)
	}
	// The cached windows: at most a few MiB.
	if got := mappedMapKiB(t) - before; got > 24<<10 {
		t.Errorf("%d KiB of the maps (%d MiB in all) stay mapped after Apply", got, mapBytes>>20)
	}
	// And a new engine on the same maps reads them back the same way.
	e2, err := Open(pinEngine(t, e))
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	got, err := e2.RuleSet()
	if err != nil || len(got.Rules) != len(rs.Rules) {
		t.Fatalf("RuleSet of the reopened engine: %d rules, %v", len(got.Rules), err)
	}
	if got := mappedMapKiB(t) - before; got > 48<<10 {
		t.Errorf("%d KiB of the maps stay mapped after reading the rules back", got)
	}
}

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestWriteRuleTable: the hand-aligned rule table is what table() writes.
func TestWriteRuleTable(t *testing.T) {
	for _, rows := range [][]ruleRow{
		nil,
		{{Index: 0, Rule: "drop udp dport 11211", Origin: "drop", Packets: 12345678901, Bytes: 7}},
		{
			{Index: 0, Rule: "drop src 10.0.0.0/8", Origin: "drop", Packets: 0, Bytes: 0},
			{Index: 1, Rule: "pass tcp src 2001:db8::/32 dport 22", Origin: "bgp", Packets: 5, Bytes: 600},
			{Index: 9, Rule: "redirect icmp queue 0-3", Origin: "redirect", Packets: 1 << 40, Bytes: 1 << 50},
		},
	} {
		var want bytes.Buffer
		tw := table(&want)
		fmt.Fprintln(tw, "#\tRULE\tORIGIN\tPACKETS\tBYTES")
		for _, r := range rows {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\n", r.Index+1, r.Rule, r.Origin, r.Packets, r.Bytes)
		}
		tw.Flush()
		var got bytes.Buffer
		bw := bufio.NewWriter(&got)
		writeRuleTable(bw, rows)
		bw.Flush()
		if got.String() != want.String() {
			t.Errorf("writeRuleTable:\n%s\nwant:\n%s", got.String(), want.String())
		}
	}
}

// TestParseRuleArgsClipsLongArgument: a long argument that is not one
// rule is quoted in part, not whole.
func TestParseRuleArgsClipsLongArgument(t *testing.T) {
	arg := "drop udp dport 53\ndrop udp dport 54 " + strings.Repeat("#", 180000)
	_, err := parseRuleArgs([]string{arg})
	want := "argument 1 " + strconv.Quote(arg[:80]) + "…(180036 bytes): want exactly one rule"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %.300v\nwant %q...", err, want)
	}
}

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRedirectRulesQueues: a filter's rules are limited to the selected
// queues, unless those are all the interface's queues, when the limit
// would exclude nothing and the rules stay as written (the program's
// plain path does not read the queue).
func TestRedirectRulesQueues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.rules")
	require.NoError(t, os.WriteFile(path, []byte("redirect udp dport 53\ndrop udp dport 54 queue 1\npolicy redirect\n"), 0o600))
	text := func(queues []int, every bool) []string {
		t.Helper()
		rs, _, err := redirectRules(path, queues, every)
		require.NoError(t, err)
		var out []string
		for _, r := range rs.Rules {
			out = append(out, r.String())
		}
		return out
	}
	require.Equal(t, []string{"redirect udp dport 53 queue 0-1", "redirect udp dport 53 queue 3", "drop udp dport 54 queue 1", "redirect queue 0-1", "redirect queue 3"},
		text([]int{0, 1, 3}, false))
	require.Equal(t, []string{"redirect udp dport 53", "drop udp dport 54 queue 1", "redirect"},
		text([]int{0, 1}, true))
	rs, _, err := redirectRules("", []int{0}, true)
	require.NoError(t, err)
	require.Len(t, rs.Rules, 1)
	require.Equal(t, "redirect", rs.Rules[0].String(), "without a filter, every queue: one rule, no queue")

	require.True(t, allQueues([]int{1, 0}, []int{0, 1}))
	require.False(t, allQueues([]int{0}, []int{0, 1}))
	require.False(t, allQueues([]int{0}, nil))
}

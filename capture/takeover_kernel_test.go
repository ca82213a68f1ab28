package capture

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// deadPID returns the process id of a process that has exited.
func deadPID(t *testing.T) uint32 {
	t.Helper()
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	return uint32(cmd.Process.Pid)
}

// TestTakeOverDeadCapture: a capture killed before it could close (its
// slot still registered, its process gone) is taken over by the next
// capture that finds every slot claimed; live ones are left alone. So a
// SIGKILL costs the program its sampling only until the next capture.
func TestTakeOverDeadCapture(t *testing.T) {
	testenv.RequireRoot(t)
	e, err := fastdrop.New(fastdrop.Options{MaxRules: 64, IPv4Blocks: 16, IPv4HostBlocks: 16, IPv6Entries: 64})
	require.NoError(t, err)
	defer e.Close()
	rs, err := fastdrop.Parse(strings.NewReader("drop udp dport 11211\n"), "t")
	require.NoError(t, err)
	require.NoError(t, e.Apply(rs))
	m, err := MapsOf(e.Maps())
	require.NoError(t, err)
	var cs []*Capture
	for range Slots {
		c, err := Start(m, Selection{})
		require.NoError(t, err)
		cs = append(cs, c)
	}
	_, err = Start(m, Selection{})
	require.ErrorIs(t, err, ErrNoSlot, "all slots held by a live process")

	// Slot 5's process "dies": its owner is a pid that has exited; its
	// registration and ring stay, as after a SIGKILL.
	cs[5].ctl.store(selOff(5, selOwner), deadPID(t))
	c, err := Start(m, Selection{Verdicts: VerdictDrop})
	require.NoError(t, err)
	require.Equal(t, 5, c.Slot())
	reg, err := Registrations(m.Main)
	require.NoError(t, err)
	require.Equal(t, uint32(1<<Slots-1), reg)
	cs[5].slot = -1 // taken over: its Close must not free the slot
	cs[5].Close()
	require.NoError(t, c.Close())
	for i, c := range cs {
		if i != 5 {
			require.NoError(t, c.Close())
		}
	}
	reg, err = Registrations(m.Main)
	require.NoError(t, err)
	require.Zero(t, reg)
}

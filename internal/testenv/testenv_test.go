package testenv

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
)

// TestSkipOrFailUnderCI re-runs this test binary with CI=true and checks
// that a missing feature fails instead of skipping, and that outside CI the
// same call skips with its reason.
func TestSkipOrFailUnderCI(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		SkipOrFail(t, "needs a kernel feature this child pretends is missing")
		return
	}
	for _, tc := range []struct {
		ci     string
		failed bool
	}{{"true", true}, {"", false}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSkipOrFailUnderCI$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", "CI="+tc.ci)
		out, err := cmd.CombinedOutput()
		if tc.failed {
			require.Error(t, err, "CI=true must fail: %s", out)
			require.Contains(t, string(out), "cannot be skipped: needs a kernel feature")
		} else {
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "SKIP")
		}
	}
}

func TestNewVethCleansUp(t *testing.T) {
	var name, nsName string
	t.Run("pair", func(t *testing.T) {
		v := NewVeth(t, VethOptions{Queues: 4, GRO: true})
		name, nsName = v.Name, v.NSName
		l, err := netlink.LinkByName(v.Name)
		require.NoError(t, err)
		require.Equal(t, 4, l.Attrs().NumRxQueues)
		require.NoError(t, v.InPeerNS(func() error {
			pl, err := netlink.LinkByName(v.PeerName)
			if err == nil {
				require.Equal(t, v.PeerIndex, pl.Attrs().Index)
			}
			return err
		}))
	})
	if name == "" {
		return // skipped
	}
	_, err := netlink.LinkByName(name)
	require.Error(t, err, "veth %s must be gone after the test", name)
	_, err = os.Stat("/var/run/netns/" + nsName)
	require.True(t, os.IsNotExist(err), "namespace %s must be gone", nsName)
}

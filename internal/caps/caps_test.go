package caps

import (
	"strings"
	"testing"
)

func TestSetString(t *testing.T) {
	for s, want := range map[Set]string{
		0:                          "none",
		Of(BPF):                    "CAP_BPF",
		Of(BPF, NetAdmin):          "CAP_NET_ADMIN and CAP_BPF",
		Of(Perfmon, BPF, NetAdmin): "CAP_NET_ADMIN, CAP_PERFMON and CAP_BPF",
		Of(Cap(63)):                "capability 63",
	} {
		if got := s.String(); got != want {
			t.Errorf("%#x: %q, want %q", uint64(s), got, want)
		}
	}
}

func TestHint(t *testing.T) {
	eff, err := Effective()
	if err != nil {
		t.Fatal(err)
	}
	// A capability no process has: bit 63 is beyond cap_last_cap.
	absent := Of(Cap(63))
	if h := Hint(absent | Of(BPF)); !strings.Contains(h, "lacks capability 63") {
		t.Errorf("Hint names the missing capability: %q", h)
	}
	if eff.Has(BPF) {
		if h := Hint(Of(BPF)); !strings.Contains(h, "which this process holds") {
			t.Errorf("Hint for a held capability: %q", h)
		}
	}
}

package bpffs

import "testing"

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/sys/fs/bpf`:       "/sys/fs/bpf",
		`/mnt/a\040b`:       "/mnt/a b",
		`/mnt/tab\011x`:     "/mnt/tab\tx",
		`/mnt/bad\09`:       `/mnt/bad\09`,
		`/mnt/short\04`:     `/mnt/short\04`,
		`/mnt/backslash\\x`: `/mnt/backslash\\x`,
	} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

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

func TestKernelVersion(t *testing.T) {
	for rel, want := range map[string][2]int{
		"6.18.44-fc-v1045": {6, 18},
		"6.1.0-18-amd64":   {6, 1},
		"7.0":              {7, 0},
		"5.15rc1":          {5, 15},
	} {
		major, minor, ok := kernelVersion(rel)
		if !ok || major != want[0] || minor != want[1] {
			t.Errorf("kernelVersion(%q) = %d, %d, %v; want %v", rel, major, minor, ok, want)
		}
	}
	if _, _, ok := kernelVersion("nonsense"); ok {
		t.Error("kernelVersion(nonsense) ok")
	}
}

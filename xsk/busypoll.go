package xsk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// setBusyPoll sets the preferred-busy-polling socket options.
func (s *Socket) setBusyPoll(b BusyPoll) error {
	if !b.Enable {
		return nil
	}
	usecs := int(b.Timeout / time.Microsecond)
	for _, o := range []struct {
		name string
		opt  int
		val  int
	}{
		{"SO_PREFER_BUSY_POLL", unix.SO_PREFER_BUSY_POLL, 1},
		{"SO_BUSY_POLL", unix.SO_BUSY_POLL, usecs},
		{"SO_BUSY_POLL_BUDGET", unix.SO_BUSY_POLL_BUDGET, b.Budget},
	} {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, o.opt, o.val); err != nil {
			hint := ""
			switch {
			case errors.Is(err, unix.ENOPROTOOPT):
				hint = " (preferred busy polling needs Linux 5.11 or later)"
			case errors.Is(err, unix.EPERM):
				hint = " (needs CAP_NET_ADMIN; run as root)"
			}
			return fmt.Errorf("xsk: set %s=%d: %w%s", o.name, o.val, err, hint)
		}
	}
	return nil
}

// NAPIDefer is the per-device setting preferred busy polling depends on:
// while the application busy-polls, the device's interrupts stay masked
// for DeferHardIRQs rounds and GROFlushTimeout, so the kernel does not
// process the queue behind the application's back.
type NAPIDefer struct {
	DeferHardIRQs   int           // /sys/class/net/IF/napi_defer_hard_irqs
	GROFlushTimeout time.Duration // /sys/class/net/IF/gro_flush_timeout (ns resolution)
}

// RecommendedNAPIDefer returns the setting the kernel's AF_XDP
// busy-polling documentation uses: 2 deferrals, 200µs.
func RecommendedNAPIDefer() NAPIDefer {
	return NAPIDefer{DeferHardIRQs: 2, GROFlushTimeout: 200 * time.Microsecond}
}

// GetNAPIDefer reads the device's napi_defer_hard_irqs and
// gro_flush_timeout, as seen in the calling thread's sysfs (the network
// namespace sysfs was mounted in).
func GetNAPIDefer(ifname string) (NAPIDefer, error) {
	var d NAPIDefer
	irqs, err := readSysfsInt(ifname, "napi_defer_hard_irqs")
	if err != nil {
		return d, err
	}
	gro, err := readSysfsInt(ifname, "gro_flush_timeout")
	if err != nil {
		return d, err
	}
	return NAPIDefer{DeferHardIRQs: int(irqs), GROFlushTimeout: time.Duration(gro)}, nil
}

// SetNAPIDefer writes the device's napi_defer_hard_irqs and
// gro_flush_timeout and returns the previous values, for restoring them
// when done. Needs root.
func SetNAPIDefer(ifname string, d NAPIDefer) (prev NAPIDefer, err error) {
	if d.DeferHardIRQs < 0 || d.GROFlushTimeout < 0 {
		return prev, fmt.Errorf("xsk: napi defer %+v: %w", d, ErrInvalidOptions)
	}
	if prev, err = GetNAPIDefer(ifname); err != nil {
		return prev, err
	}
	if err := writeSysfsInt(ifname, "napi_defer_hard_irqs", int64(d.DeferHardIRQs)); err != nil {
		return prev, err
	}
	if err := writeSysfsInt(ifname, "gro_flush_timeout", int64(d.GROFlushTimeout)); err != nil {
		return prev, errors.Join(err, writeSysfsInt(ifname, "napi_defer_hard_irqs", int64(prev.DeferHardIRQs)))
	}
	return prev, nil
}

// NAPIDeferNote returns "" when busy polling on ifname has what it needs,
// else a one-line note saying what is missing and how to set it.
func NAPIDeferNote(ifname string) string {
	d, err := GetNAPIDefer(ifname)
	if err != nil {
		return fmt.Sprintf("cannot read the NAPI settings busy polling depends on: %v", err)
	}
	if d.DeferHardIRQs > 0 && d.GROFlushTimeout > 0 {
		return ""
	}
	r := RecommendedNAPIDefer()
	return fmt.Sprintf("busy polling on %s is not preferred over interrupts: napi_defer_hard_irqs=%d gro_flush_timeout=%d; "+
		"set them with xsk.SetNAPIDefer or: echo %d > /sys/class/net/%s/napi_defer_hard_irqs; echo %d > /sys/class/net/%s/gro_flush_timeout",
		ifname, d.DeferHardIRQs, d.GROFlushTimeout.Nanoseconds(), r.DeferHardIRQs, ifname, r.GROFlushTimeout.Nanoseconds(), ifname)
}

func sysfsPath(ifname, file string) (string, error) {
	if ifname == "" || strings.ContainsAny(ifname, "/") || ifname == "." || ifname == ".." {
		return "", fmt.Errorf("xsk: interface name %q: %w", ifname, ErrInvalidOptions)
	}
	return filepath.Join("/sys/class/net", ifname, file), nil
}

func readSysfsInt(ifname, file string) (int64, error) {
	p, err := sysfsPath(ifname, file)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("xsk: read %s: %w", p, err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("xsk: parse %s: %w", p, err)
	}
	return v, nil
}

func writeSysfsInt(ifname, file string, v int64) error {
	p, err := sysfsPath(ifname, file)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p, []byte(strconv.FormatInt(v, 10)), 0); err != nil {
		return fmt.Errorf("xsk: write %s: %w (needs root)", p, err)
	}
	return nil
}

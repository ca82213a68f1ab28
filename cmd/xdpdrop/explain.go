package main

import (
	"errors"
	"strings"

	"golang.org/x/sys/unix"
)

// explain turns an error into the one line a user sees. The packages' own
// messages already say what went wrong and what to do; here we only add
// what a bare errno would leave out.
func explain(err error) string {
	msg := err.Error()
	if (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)) && !strings.Contains(msg, "CAP_") {
		return msg + " (needs root, or CAP_NET_ADMIN, CAP_BPF and CAP_PERFMON)"
	}
	return msg
}

package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/xdpdrop/xdpdrop/loader"
)

// addLockTimeout adds --lock-timeout to a command that changes what runs
// on an interface: such commands take the interface's lock, so that two
// of them run one after the other instead of through each other.
func addLockTimeout(cmd *cobra.Command, d *time.Duration) {
	cmd.Flags().DurationVar(d, "lock-timeout", loader.DefaultLockTimeout,
		"how long to wait for another xdpdrop command that is changing the same interface")
}

// lockIface takes the lock of iface, waiting up to timeout. The caller
// holds it until its last change is written.
func (a *app) lockIface(iface string, timeout time.Duration) (*loader.Lock, error) {
	if timeout < 0 {
		return nil, usagef("--lock-timeout %s: must not be negative", timeout)
	}
	l, err := loader.LockInterface(a.pinRoot, iface, timeout)
	if errors.Is(err, loader.ErrLocked) {
		return nil, fmt.Errorf("%w, or wait longer with --lock-timeout", err)
	}
	return l, err
}

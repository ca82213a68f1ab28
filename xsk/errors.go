package xsk

import "errors"

// Sentinels that callers branch on. Errors returned by this package wrap
// them (and the kernel's errno, where there is one) with %w.
var (
	// ErrInvalidOptions: an option is out of range or options conflict.
	// Nothing was created.
	ErrInvalidOptions = errors.New("invalid options")

	// ErrZeroCopyUnsupported: zero-copy was required (BindZeroCopy) but
	// the driver of the interface cannot do it (veth, for one). BindAuto
	// or BindCopy work there.
	ErrZeroCopyUnsupported = errors.New("driver does not support AF_XDP zero-copy")

	// ErrInvalidFrame: a frame passed to Release or Transmit is not held
	// by the caller (released twice, already transmitted, from another
	// UMEM, or its Data does not lie in its own frame).
	ErrInvalidFrame = errors.New("frame not held by the application")

	// ErrClosed: the socket or UMEM was closed.
	ErrClosed = errors.New("socket closed")
)

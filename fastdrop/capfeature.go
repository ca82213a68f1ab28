package fastdrop

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"

	"github.com/xdpdrop/xdpdrop/gen"
)

// featCapture is FD_FEAT_CAPTURE: set in both halves' fd_conf.features
// while fd_main's cap_active is not 0, so that every frame takes the
// program's full path, which has the capture hook, while a capture runs
// or a rule has a sample modifier; with neither the plain path has no
// capture code at all (bpf/fastdrop.c, fd_run).
const featCapture = uint32(gen.FastdropFdLayoutFD_FEAT_CAPTURE)

// SyncCapture makes FD_FEAT_CAPTURE in both halves of the engine whose
// fd_main is main say whether its cap_active is not 0. Whoever changes
// cap_active calls it afterwards (package capture, as a capture starts
// and ends), as the engine does after each write of a half's fd_conf
// (which does not know of captures). Both halves: the engine may make the
// other one active at any time.
func SyncCapture(main *ebpf.Map) error {
	page := os.Getpagesize()
	mem, err := newMapMem(main, 0, page, 3)
	if err != nil {
		return fmt.Errorf("fastdrop: %w", err)
	}
	defer mem.release()
	return syncCapture(mem)
}

// errCaptureFlapping: cap_active changed at every try.
var errCaptureFlapping = errors.New("fastdrop: captures start and stop faster than their flag can follow")

// syncCapture is SyncCapture on ctl, a mapping of fd_main from offset 0.
// Several processes may run it at once (captures starting and ending, an
// engine's change): each sets the bit from the cap_active it read, then
// reads cap_active again and goes round until the two agree, so the last
// one to finish leaves the bit right.
func syncCapture(ctl *mapMem) error {
	read := func() (v uint32, err error) {
		err = ctl.access(int64(capActiveOff), 4, func(b []byte) { v = word(b).Load() })
		return v, err
	}
	on, err := read()
	for range 1000 {
		if err != nil {
			return fmt.Errorf("fastdrop: read the capture word: %w", err)
		}
		for h := range uint32(2) {
			err = ctl.access(ctlConfOffset(h)+confFeaturesOff, 4, func(b []byte) {
				if on != 0 {
					word(b).Or(featCapture)
				} else {
					word(b).And(^featCapture)
				}
			})
			if err != nil {
				return fmt.Errorf("fastdrop: set the capture feature: %w", err)
			}
		}
		again, rerr := read()
		if rerr == nil && (again != 0) == (on != 0) {
			return nil
		}
		on, err = again, rerr
	}
	return errCaptureFlapping
}

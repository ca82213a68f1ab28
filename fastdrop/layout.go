package fastdrop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf"

	"github.com/xdpdrop/xdpdrop/gen"
)

// ErrOtherLayout is wrapped by Open and RuleCount when the pinned maps
// were made by a version of xdpdrop whose maps have another layout: this
// one would misread them. The way out is to detach and attach again.
var ErrOtherLayout = errors.New("pinned by another version of xdpdrop")

const (
	layoutVersion = uint32(gen.FastdropFdLayoutFD_LAYOUT_VERSION)
	mainStamp     = int64(gen.FastdropFdLayoutFD_MAIN_STAMP)
	// The value size of fd_main: the control area, then two halves.
	mainSize = mainHalf + 2*halfSize
)

// currentStamp is what this version writes into the maps it creates.
func currentStamp() gen.FastdropFdStamp {
	return gen.FastdropFdStamp{
		LayoutVersion: layoutVersion,
		RecSize:       uint32(recSize),
		ConfSize:      uint32(binary.Size(gen.FastdropFdConf{})),
		HalfSize:      uint32(halfSize),
	}
}

func writeStamp(ctl io.WriterAt, st gen.FastdropFdStamp) error {
	b, err := binary.Append(nil, binary.NativeEndian, &st)
	if err == nil {
		_, err = ctl.WriteAt(b, mainStamp)
	}
	if err != nil {
		return fmt.Errorf("write layout stamp: %w", err)
	}
	return nil
}

func readStamp(ctl io.ReaderAt) (gen.FastdropFdStamp, error) {
	var st gen.FastdropFdStamp
	b := make([]byte, binary.Size(st))
	if _, err := ctl.ReadAt(b, mainStamp); err != nil {
		return st, fmt.Errorf("read layout stamp: %w", err)
	}
	_, err := binary.Decode(b, binary.NativeEndian, &st)
	return st, err
}

func otherLayout(dir string, pinned uint32, why string) error {
	return fmt.Errorf("fastdrop: the maps in %s were %w (layout %d, this one %d%s); detach and attach again",
		dir, ErrOtherLayout, pinned, layoutVersion, why)
}

// checkLayout tells whether maps pinned in dir have the layout this
// version reads: the stamp their creator wrote (checkStamp), then the
// sizes the kernel knows, which a stamp cannot misstate.
func checkLayout(dir string, maps map[string]*ebpf.Map) error {
	version, err := checkStamp(dir, maps[gen.FastdropMapFdMain])
	if err != nil {
		return err
	}
	nslots := int64(maps[gen.FastdropMapFdRules].MaxEntries())
	for _, s := range []struct {
		name string
		want int64 // 0: any multiple of mult
		mult int64
	}{
		{gen.FastdropMapFdMain, mainSize, 0},
		{gen.FastdropMapFdRules, int64(recSize), 0},
		{gen.FastdropMapFdCounters, nslots * int64(counterSize), 0},
		{gen.FastdropMapFdV4Tbl8, int64(v4GroupBytes), 0},
		{gen.FastdropMapFdV4Sparse, int64(sparseSize), 0},
		{gen.FastdropMapFdV6Tab, 0, int64(v6EntSize)},
	} {
		got := int64(maps[s.name].ValueSize())
		if (s.want != 0 && got != s.want) || (s.mult != 0 && got%s.mult != 0) {
			want := fmt.Sprint(s.want)
			if s.want == 0 {
				want = fmt.Sprintf("a multiple of %d", s.mult)
			}
			return otherLayout(dir, version, fmt.Sprintf(": map %s holds %d-byte values, this one %s", s.name, got, want))
		}
	}
	return nil
}

// checkStamp reads the stamp of fd_main and returns its layout version,
// or an error if it is not this version's. The version covers what sizes
// do not show (the meaning of a field, an offset inside a value); maps
// from before the stamp read as layout 0.
func checkStamp(dir string, main *ebpf.Map) (uint32, error) {
	if int64(main.ValueSize()) < mainHalf {
		return 0, otherLayout(dir, 0, fmt.Sprintf(": map %s holds %d-byte values, this one %d", gen.FastdropMapFdMain, main.ValueSize(), mainSize))
	}
	ctl, err := newMapMem(main, 0, int(mainHalf), 1)
	if err != nil {
		return 0, fmt.Errorf("fastdrop: %w", err)
	}
	defer ctl.release()
	st, err := readStamp(ctl)
	if err != nil {
		return 0, fmt.Errorf("fastdrop: %s: %w", dir, err)
	}
	want := currentStamp()
	if st.LayoutVersion != want.LayoutVersion {
		return st.LayoutVersion, otherLayout(dir, st.LayoutVersion, "")
	}
	if st != want {
		return st.LayoutVersion, otherLayout(dir, st.LayoutVersion, fmt.Sprintf(
			": records, configuration and half of %d, %d and %d bytes, this one %d, %d and %d",
			st.RecSize, st.ConfSize, st.HalfSize, want.RecSize, want.ConfSize, want.HalfSize))
	}
	return st.LayoutVersion, nil
}

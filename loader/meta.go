package loader

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/caps"
)

// metaMapName names the map that marks a program as ours and carries Meta.
const metaMapName = "xdpdrop_meta"

// maxMetaSize bounds the JSON kept in the meta map.
const maxMetaSize = 64 << 10

// Meta is what an attachment records about itself, readable from any
// process: by Status for any program of ours, by Open for pinned ones.
// Field names are stable (they are part of `xdpdrop status --json`).
type Meta struct {
	// Interface and Ifindex the program was attached to, in network
	// namespace NetNS (the namespace's inode number).
	Interface string `json:"interface"`
	Ifindex   int    `json:"ifindex"`
	NetNS     uint64 `json:"netns"`
	// Mode and Method of the attachment, and why this mode (ModeAuto).
	Mode   Mode   `json:"mode"`
	Method Method `json:"method"`
	Reason string `json:"reason,omitempty"`
	// AttachedAt is when Attach ran; PID the process that called it.
	AttachedAt time.Time `json:"attached_at"`
	PID        int       `json:"pid"`
	// ReplacedAt is when the program was last replaced (zero: never).
	ReplacedAt time.Time `json:"replaced_at,omitzero"`
	// Maps lists the names of the maps pinned with the attachment.
	Maps []string `json:"maps,omitempty"`
	// Config is the caller's configuration (Options.Config).
	Config map[string]string `json:"config,omitempty"`
}

// newMetaMap makes a frozen one-entry array map holding m as JSON.
func newMetaMap(m Meta) (*ebpf.Map, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode attachment metadata: %w", err)
	}
	if len(b) > maxMetaSize {
		return nil, fmt.Errorf("attachment metadata is %d bytes, more than %d: record a smaller configuration with the attachment", len(b), maxMetaSize)
	}
	size := (len(b) + 7) &^ 7
	mp, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       metaMapName,
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  uint32(size),
		MaxEntries: 1,
		// Programs never touch it; user space may not change it once
		// frozen: the record is what Attach wrote.
		Flags: unix.BPF_F_RDONLY_PROG,
	})
	if err != nil {
		return nil, wrapNeed("create metadata map", err, caps.Of(caps.BPF))
	}
	val := make([]byte, size)
	copy(val, b)
	if err := mp.Put(uint32(0), val); err != nil {
		mp.Close()
		return nil, wrapErr("write metadata map", err)
	}
	if err := mp.Freeze(); err != nil && !isNotSupported(err) {
		mp.Close()
		return nil, wrapErr("freeze metadata map", err)
	}
	return mp, nil
}

// isMetaMap reports whether info describes a meta map.
func isMetaMap(info *ebpf.MapInfo) bool {
	return info.Name == metaMapName && info.Type == ebpf.Array && info.KeySize == 4 && info.MaxEntries == 1
}

// readMeta decodes a meta map.
func readMeta(mp *ebpf.Map) (Meta, error) {
	info, err := mp.Info()
	if err != nil {
		return Meta{}, wrapErr("metadata map info", err)
	}
	if !isMetaMap(info) {
		return Meta{}, fmt.Errorf("map %q is not an xdpdrop metadata map", info.Name)
	}
	val := make([]byte, info.ValueSize)
	if err := mp.Lookup(uint32(0), &val); err != nil {
		return Meta{}, wrapErr("read metadata map", err)
	}
	var m Meta
	if err := json.Unmarshal(bytes.TrimRight(val, "\x00"), &m); err != nil {
		return Meta{}, fmt.Errorf("decode metadata map: %w", err)
	}
	return m, nil
}

// progMeta finds the meta map bound to prog that names the interface
// ifindex of the current namespace. found is false for a foreign program.
func progMeta(prog *ebpf.Program, ifindex int) (meta Meta, found bool, err error) {
	info, err := prog.Info()
	if err != nil {
		return Meta{}, false, wrapErr("program info", err)
	}
	return infoMeta(info, ifindex)
}

func infoMeta(info *ebpf.ProgramInfo, ifindex int) (meta Meta, found bool, err error) {
	ids, ok := info.MapIDs()
	if !ok {
		return Meta{}, false, nil
	}
	ns, err := netnsID()
	if err != nil {
		return Meta{}, false, err
	}
	var newest ebpf.MapID
	for _, id := range ids {
		mp, err := ebpf.NewMapFromID(id)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return Meta{}, false, wrapErr(fmt.Sprintf("open map id %d", id), err)
		}
		mi, err := mp.Info()
		if err != nil || !isMetaMap(mi) {
			mp.Close()
			continue
		}
		m, err := readMeta(mp)
		mp.Close()
		if err != nil {
			continue
		}
		// The index and namespace identify the interface; its name may
		// have changed since.
		if m.Ifindex != ifindex || (m.NetNS != 0 && m.NetNS != ns) {
			continue
		}
		// A program attached, detached and attached again to the same
		// interface has several meta maps: the newest (highest id, ids
		// only grow) is current.
		if !found || id > newest {
			meta, found, newest = m, true, id
		}
	}
	return meta, found, nil
}

// netnsID identifies the calling thread's network namespace by inode.
func netnsID() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("identify network namespace: %w", err)
	}
	return st.Ino, nil
}

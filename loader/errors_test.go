package loader_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
	"github.com/xdpdrop/xdpdrop/loader"
)

// TestNotPermitted: a process without capabilities gets ErrNotPermitted
// naming the capability it lacks from attach (both methods) and a forced
// detach, and leaves nothing behind; status works without any.
func TestNotPermitted(t *testing.T) {
	free := testenv.NewVeth(t, testenv.VethOptions{})
	busy := testenv.NewVeth(t, testenv.VethOptions{})
	objs := loadBasic(t, gen.BasicVerdictVERDICT_PASS)
	a, err := loader.Attach(objs.XdpPass, loader.Options{Interface: busy.Name})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })

	progFile := os.NewFile(uintptr(dupFD(t, objs.XdpPass.FD())), "prog")
	defer progFile.Close()
	res := runChild(t, "unprivileged", []string{"IFACE=" + free.Name, "BUSY_IFACE=" + busy.Name}, func(c *exec.Cmd) {
		c.ExtraFiles = []*os.File{progFile}
	})
	require.Len(t, res.Maps, 3)
	for _, msg := range res.Maps {
		t.Log(msg)
		require.Contains(t, msg, "this process lacks CAP_")
		require.Contains(t, msg, "run as root")
	}
	// The attaches fail at the first map (CAP_BPF); the forced detach at
	// opening the foreign program by id, to be able to put it back.
	require.Contains(t, res.Maps[0], "lacks CAP_BPF")
	require.Contains(t, res.Maps[1], "lacks CAP_BPF")
	require.Contains(t, res.Maps[2], "lacks CAP_SYS_ADMIN")
	requireClean(t, free.Name, "")
	st := statusOf(t, busy.Name, "")
	require.Len(t, st.Programs, 1, "the unprivileged detach removed nothing")
}

func dupFD(t *testing.T, fd int) int {
	t.Helper()
	d, err := syscall.Dup(fd)
	require.NoError(t, err)
	return d
}

// TestVerifierRejection: the error of a program the verifier rejects
// wraps ErrVerifier and the *ebpf.VerifierError, and shows the end of the
// log (where the reason is), not all of it.
func TestVerifierRejection(t *testing.T) {
	testenv.RequireRoot(t)
	insns := asm.Instructions{asm.Mov.Imm(asm.R3, 0)}
	for range 40 { // a log long enough to need cutting
		insns = append(insns, asm.Add.Imm(asm.R3, 1))
	}
	insns = append(insns,
		// r2 = ctx->data; r0 = *(u8 *)r2 without checking data_end.
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
		asm.LoadMem(asm.R0, asm.R2, 0, asm.Byte),
		asm.Return(),
	)
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
		"bad": {Name: "xdp_bad", Type: ebpf.XDP, License: "GPL", Instructions: insns},
	}}
	var objs struct {
		Bad *ebpf.Program `ebpf:"bad"`
	}
	err := loader.Load(spec, &objs, nil)
	require.ErrorIs(t, err, loader.ErrVerifier)
	var ve *ebpf.VerifierError
	require.ErrorAs(t, err, &ve)
	msg := err.Error()
	t.Log(msg)
	require.Contains(t, msg, "invalid access to packet")
	require.Contains(t, msg, "program bad")
	require.Contains(t, msg, "verifier log, last")
	lines := strings.Split(msg, "\n")
	require.Less(t, len(lines), 20, "the whole log is not shown")
	require.Greater(t, len(ve.Log), 40)
	require.NotContains(t, msg, ve.Log[0], "the start of the log is cut")
}

// TestNoBPFFS: pinning under a directory that is not bpffs fails before
// anything is attached, and says how to mount bpffs.
func TestNoBPFFS(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	objs := loadBasic(t, gen.BasicVerdictVERDICT_PASS)
	root := filepath.Join(t.TempDir(), "pins")
	_, err := loader.Attach(objs.XdpPass, loader.Options{Interface: v.Name, Pin: true, PinRoot: root})
	require.ErrorIs(t, err, loader.ErrNoBPFFS)
	require.Contains(t, err.Error(), "mount -t bpf bpf")
	requireClean(t, v.Name, "")
	_, err = os.Stat(root)
	require.ErrorIs(t, err, os.ErrNotExist, "nothing created")
}

// TestBPFFSNotMountable: in a mount namespace where /sys/fs is an empty
// read-only tmpfs, bpffs is absent and cannot be mounted at /sys/fs/bpf; a
// pinned attach says so and leaves the interface (shared with this
// process) without a program.
func TestBPFFSNotMountable(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	res := runChild(t, "no-bpffs", []string{"IFACE=" + v.Name}, func(c *exec.Cmd) {
		c.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	})
	t.Log(res.Err)
	require.True(t, res.Is["ErrNoBPFFS"], res.Err)
	require.Contains(t, res.Err, "mount -t bpf bpf /sys/fs/bpf")
	requireClean(t, v.Name, "")
}

// TestBadArguments: checks made before any system call.
func TestBadArguments(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	objs := loadBasic(t, gen.BasicVerdictVERDICT_PASS)
	_, err := loader.Attach(nil, loader.Options{Interface: v.Name})
	require.Error(t, err)
	_, err = loader.Attach(objs.XdpPass, loader.Options{Interface: v.Name, Mode: 9})
	require.Error(t, err)
	_, err = loader.Attach(objs.XdpPass, loader.Options{Interface: v.Name, Maps: map[string]*ebpf.Map{"a/b": objs.Verdicts}})
	require.Error(t, err)
	_, err = loader.Attach(objs.XdpPass, loader.Options{Interface: v.Name, Config: map[string]string{"big": strings.Repeat("x", 70<<10)}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "smaller configuration")
	requireClean(t, v.Name, "")
	require.False(t, errors.Is(err, loader.ErrForeign))
}

// TestNotPermittedNetAdmin: with CAP_BPF but without CAP_NET_ADMIN, the
// netlink attach itself is refused (not just the map creation), with the
// message naming CAP_NET_ADMIN, and nothing is left attached.
func TestNotPermittedNetAdmin(t *testing.T) {
	v := testenv.NewVeth(t, testenv.VethOptions{})
	objs := loadBasic(t, gen.BasicVerdictVERDICT_PASS)
	progFile := os.NewFile(uintptr(dupFD(t, objs.XdpPass.FD())), "prog")
	defer progFile.Close()
	res := runChild(t, "unprivileged", []string{"IFACE=" + v.Name, "KEEP_BPF_CAPS=1"}, func(c *exec.Cmd) {
		c.ExtraFiles = []*os.File{progFile}
	})
	require.Len(t, res.Maps, 2)
	// Linux 6.18 checks no capability for creating an XDP bpf_link beyond
	// holding the program's fd (CAP_BPF to load it): the link attach may
	// succeed. rtnetlink wants CAP_NET_ADMIN.
	t.Log("bpf_link: ", res.Maps[0])
	require.Contains(t, res.Maps[1], "CAP_NET_ADMIN")
	require.Contains(t, res.Maps[1], "not permitted")
	requireClean(t, v.Name, "")
}

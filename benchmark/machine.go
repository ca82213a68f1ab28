package benchmark

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine describes where a report was measured.
type Machine struct {
	CPUModel string `json:"cpu_model"`
	// CPUs is the number of CPUs this process may run on.
	CPUs int `json:"cpus"`
	// Virtual is set when the CPU reports running under a hypervisor.
	Virtual   bool   `json:"virtual"`
	Kernel    string `json:"kernel"` // release, as uname -r
	Arch      string `json:"arch"`
	GoVersion string `json:"go_version"`
}

// String is a one-line description, e.g. "AMD EPYC, 2 vCPUs, Linux 6.18.44, amd64".
func (m Machine) String() string {
	cpu := "CPUs"
	if m.Virtual {
		cpu = "vCPUs"
	}
	model := m.CPUModel
	if model == "" {
		model = "unknown CPU"
	}
	return fmt.Sprintf("%s, %d %s, Linux %s, %s", model, m.CPUs, cpu, m.Kernel, m.Arch)
}

// DescribeMachine reads the CPU model, the CPU count and the kernel
// release. What it cannot read stays empty.
func DescribeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Arch: runtime.GOARCH, GoVersion: runtime.Version()}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = string(bytes.TrimRight(u.Release[:], "\x00"))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			switch k {
			case "model name", "Model", "cpu model":
				if m.CPUModel == "" {
					m.CPUModel = v
				}
			case "flags":
				if !m.Virtual && hasWord(v, "hypervisor") {
					m.Virtual = true
				}
			}
		}
	}
	return m
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// loadAvg returns the 1-minute load average, 0 if unknown.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	if _, err := fmt.Sscan(string(b), &l); err != nil {
		return 0
	}
	return l
}

package benchmark

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cpuTicks is where the machine's CPU time went, in clock ticks, summed
// over the CPUs.
type cpuTicks struct {
	busy  uint64 // user, nice, system, irq, softirq
	steal uint64 // taken by the hypervisor for other guests
	total uint64 // everything, idle included
	ours  uint64 // of busy: this process, its generator, the kernel threads doing its network work
	// The generator's CPU alone: its idle time (idle and iowait) and all
	// its time.
	genIdle, genTotal uint64
}

func (c cpuTicks) sub(o cpuTicks) cpuTicks {
	return cpuTicks{busy: c.busy - o.busy, steal: c.steal - o.steal, total: c.total - o.total, ours: c.ours - o.ours,
		genIdle: c.genIdle - o.genIdle, genTotal: c.genTotal - o.genTotal}
}

// genIdlePct is the share of the generator's CPU's time that nothing ran
// on it: the live-frames generator slept (waiting for RCU grace periods)
// and nothing else wanted the CPU. -1 when unknown.
func (c cpuTicks) genIdlePct() float64 {
	if c.genTotal == 0 {
		return -1
	}
	return float64(c.genIdle) / float64(c.genTotal) * 100
}

// otherPct is the share of the machine's CPU time that other work used.
func (c cpuTicks) otherPct() float64 {
	if c.total == 0 || c.ours >= c.busy {
		return 0
	}
	return float64(c.busy-c.ours) / float64(c.total) * 100
}

// stealPct is the share the hypervisor gave to other guests.
func (c cpuTicks) stealPct() float64 {
	if c.total == 0 {
		return 0
	}
	return float64(c.steal) / float64(c.total) * 100
}

// readCPUTicks reads /proc/stat and the times of the tasks that are the
// benchmark's: this process and pids (its generator, the NAPI threads it
// made, the ksoftirqd threads, which do the network work that cannot wait:
// ours, while a case runs), and the idle time of genCPU. Errors leave the
// figures at zero.
func readCPUTicks(pids []string, genCPU int) cpuTicks {
	var c cpuTicks
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return c
	}
	c.busy, c.steal, c.total, c.genIdle, c.genTotal = parseProcStat(string(b), genCPU)
	if c.total == 0 {
		return cpuTicks{}
	}
	c.ours = taskTicks("self")
	for _, p := range pids {
		c.ours += taskTicks(p)
	}
	return c
}

// parseProcStat reads the machine's busy, steal and total ticks from the
// "cpu" line of /proc/stat, and the idle and total ticks of CPU cpu from
// its "cpuN" line (zero if absent).
func parseProcStat(stat string, cpu int) (busy, steal, total, idle, cpuTotal uint64) {
	want := "cpu" + strconv.Itoa(cpu)
	for _, line := range strings.Split(stat, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || (f[0] != "cpu" && f[0] != want) {
			continue
		}
		v := make([]uint64, 8)
		for i := range v {
			v[i], _ = strconv.ParseUint(f[i+1], 10, 64)
		}
		// user nice system idle iowait irq softirq steal
		all := v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7]
		if f[0] == "cpu" {
			busy, steal, total = v[0]+v[1]+v[2]+v[5]+v[6], v[7], all
		} else {
			idle, cpuTotal = v[3]+v[4], all
		}
	}
	return busy, steal, total, idle, cpuTotal
}

// taskTicks returns utime+stime of /proc/PID (a process: all its threads).
func taskTicks(pid string) uint64 {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	// pid (comm) state ppid ... ; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// After the comm: state(0) ppid(1) ... utime(11) stime(12).
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return u + st
}

// ksoftirqds lists the pids of the ksoftirqd threads.
func ksoftirqds() []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err == nil && strings.HasPrefix(string(b), "ksoftirqd/") {
			out = append(out, e.Name())
		}
	}
	return out
}

// pidOf returns the process id of a generator run in another process.
func pidOf(r Running) (int, bool) {
	p, ok := r.(interface{ Pid() int })
	if !ok {
		return 0, false
	}
	return p.Pid(), true
}

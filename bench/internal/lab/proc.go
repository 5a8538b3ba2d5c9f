package lab

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// every Linux architecture pepsi runs on).
const userHZ = 100

// procCPU returns the CPU time (user + system, all threads) that process
// pid has used so far.
func procCPU(pid int) (time.Duration, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	// Fields after the command: state is field 3, utime 14, stime 15.
	ut, err1 := strconv.ParseInt(f[14-3], 10, 64)
	st, err2 := strconv.ParseInt(f[15-3], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad CPU times", pid)
	}
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

// procStat returns the fields of /proc/PID/stat after the command name,
// the first being the state (field 3).
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return nil, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	return f, nil
}

// procHWM returns the peak resident set size of process pid (VmHWM), in bytes.
func procHWM(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmHWM %q", pid, v)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// children returns the live processes whose parent is pid.
func children(pid int) []int {
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	want := strconv.Itoa(pid)
	var out []int
	for _, p := range paths {
		child, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		if f, err := procStat(child); err == nil && f[1] == want && f[0] != "Z" {
			out = append(out, child)
		}
	}
	return out
}

// cpuOf returns the CPU time of each process that can be read.
func cpuOf(pids []int) map[int]time.Duration {
	m := make(map[int]time.Duration, len(pids))
	for _, p := range pids {
		if c, err := procCPU(p); err == nil {
			m[p] = c
		}
	}
	return m
}

// cpuSince is the CPU the processes of now used since then (a process
// that was not there then counts from zero).
func cpuSince(then, now map[int]time.Duration) time.Duration {
	var d time.Duration
	for p, c := range now {
		d += c - then[p]
	}
	return d
}

// loadAvg returns the one-minute load average, or -1.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

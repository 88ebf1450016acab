package benchrun

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"github.com/galleon-mesh/galleon/internal/testing/procstat"
)

// ProcKB is a field of /proc/<pid>/status counted in kB (VmRSS, VmHWM).
func ProcKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("cannot read /proc/%d/status: %w", pid, err)
	}
	kb, err := StatusKB(string(b), field)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	return kb, nil
}

// StatusKB reads field (VmHWM) from the text of a /proc/<pid>/status ("VmHWM:	  123 kB").
func StatusKB(status, field string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == field+":" {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s line", field)
}

// CPUTicks is the process's utime + stime in clock ticks (ClockTicks a second).
func CPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cannot read /proc/%d/stat: %w", pid, err)
	}
	return StatTicks(string(b))
}

// StatTicks is utime + stime (fields 14 and 15) of a /proc/<pid>/stat text.
func StatTicks(stat string) (int64, error) {
	st, err := procstat.Parse(stat)
	if err != nil {
		return 0, fmt.Errorf("/proc/<pid>/stat: %w", err)
	}
	return st.UTime + st.STime, nil
}

// MachineTicks is the whole machine's busy and total clock ticks (/proc/stat's cpu line; idle
// and iowait are not busy).
func MachineTicks() (busy, total int64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("cannot read /proc/stat: %w", err)
	}
	return StatMachineTicks(string(b))
}

// StatMachineTicks reads the cpu line of a /proc/stat text.
func StatMachineTicks(stat string) (busy, total int64, err error) {
	for _, line := range strings.Split(stat, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != "cpu" {
			continue
		}
		var v [16]int64
		for i, s := range f[1:] {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("/proc/stat cpu line: %q is not a number", s)
			}
			total += n
			if i < len(v) {
				v[i] = n
			}
		}
		return total - v[3] - v[4], total, nil
	}
	return 0, 0, fmt.Errorf("/proc/stat has no cpu line")
}

// ClockTicks is getconf CLK_TCK, the unit of CPUTicks and MachineTicks.
func ClockTicks(ctx context.Context) (int64, error) {
	out, err := exec.CommandContext(ctx, "getconf", "CLK_TCK").Output()
	if err != nil {
		return 0, fmt.Errorf("getconf CLK_TCK: %w", err)
	}
	return strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
}

// LoadAvg is the load average over 1, 5 and 15 minutes: "0.52 0.61 0.70", "?" without /proc.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return LoadAvgOf(string(b))
}

// LoadAvgOf is the first three fields of a /proc/loadavg text.
func LoadAvgOf(text string) string {
	f := strings.Fields(text)
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// NProc is the CPUs this process may run on (nproc).
func NProc() int { return runtime.NumCPU() }

// CheckProc fails without /proc/self/status: the benchmarks read memory there (Linux).
func CheckProc() error {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		return fmt.Errorf("no /proc: this benchmark reads memory from /proc/<pid>/status (Linux)")
	}
	return nil
}

// Package procstat reads what Linux's /proc/<pid>/stat says of a process: its parent and the CPU
// time it and its waited-for children used. The benchmarks, the start-up watch of the tool
// cache and the tests that measure a server's CPU read it here, in one way.
package procstat

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClockTick is the unit of the stat file's times: USER_HZ, 100 a second on Linux whatever the
// kernel's HZ (the Prometheus process collector assumes the same).
const ClockTick = 10 * time.Millisecond

// Stat is what a /proc/<pid>/stat line says of a process. The times are in clock ticks.
type Stat struct {
	PPID int
	// UTime and STime are the process's own user and system time (all its threads);
	// CUTime and CSTime its waited-for children's.
	UTime, STime, CUTime, CSTime int64
}

// CPU is the process's own user + system time.
func (s Stat) CPU() time.Duration { return time.Duration(s.UTime+s.STime) * ClockTick }

// Read reads /proc/<pid>/stat.
func Read(pid int) (Stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	st, err := Parse(string(b))
	if err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// Parse reads a /proc/<pid>/stat line: ppid (field 4) and utime, stime, cutime and cstime
// (fields 14 to 17). The command name, field 2, may hold spaces and parentheses, so fields are
// counted after its last closing parenthesis.
func Parse(s string) (Stat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("no \")\" after the command name in %.40q", s)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3, the state
	if len(f) < 15 {
		return Stat{}, fmt.Errorf("%d fields after the command name, want 15 or more", len(f))
	}
	var n [5]int64
	for j, k := range []int{1, 11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return Stat{}, fmt.Errorf("field %d: %w", k+3, errors.Unwrap(err))
		}
		n[j] = v
	}
	return Stat{PPID: int(n[0]), UTime: n[1], STime: n[2], CUTime: n[3], CSTime: n[4]}, nil
}

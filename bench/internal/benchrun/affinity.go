package benchrun

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ParseCPUs reads a CPU list such as "1" or "0,2-3" (the form of taskset -c); "" is none.
func ParseCPUs(name, s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b, err2 := a, error(nil)
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, fmt.Errorf("%s=%s: want CPU numbers and ranges, e.g. 1 or 0,2-3", name, s)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

// Pin sets the CPU affinity of every thread of process pid to cpus. Threads the process starts
// later inherit it from the thread that starts them, and children from their parent, so pinning
// a process once pins what it runs from then on.
func Pin(pid int, cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH { // a thread that ended meanwhile
			return fmt.Errorf("pin thread %d of process %d to CPUs %v: %w", tid, pid, cpus, err)
		}
	}
	return nil
}

// OtherCPUs is every CPU this process may run on but those of cpus.
func OtherCPUs(cpus []int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var out []int
	for c := range 1024 {
		if set.IsSet(c) && !slices.Contains(cpus, c) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("CPUs %v leave no other CPU for the rest of the benchmark", cpus)
	}
	return out, nil
}

package benchrun

import (
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseCPUs(t *testing.T) {
	for in, want := range map[string][]int{"": nil, "1": {1}, "0,2-3": {0, 2, 3}} {
		if got, err := ParseCPUs("X", in); err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseCPUs(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"a", "3-1", "-1", "1,"} {
		if _, err := ParseCPUs("X", bad); err == nil {
			t.Errorf("ParseCPUs(%q): no error", bad)
		}
	}
}

// Pin narrows this test process's own threads to one of its CPUs and back.
func TestPinThisProcess(t *testing.T) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	first := -1
	for c := range 1024 {
		if before.IsSet(c) {
			first = c
			break
		}
	}
	all, err := OtherCPUs(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := Pin(os.Getpid(), []int{first}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := Pin(os.Getpid(), all); err != nil {
			t.Fatal(err)
		}
	}()
	var now unix.CPUSet
	if err := unix.SchedGetaffinity(0, &now); err != nil {
		t.Fatal(err)
	}
	if now.Count() != 1 || !now.IsSet(first) {
		t.Errorf("after Pin to CPU %d this thread may run on %d CPUs", first, now.Count())
	}
	if _, err := OtherCPUs(all); err == nil {
		t.Error("OtherCPUs of every CPU: no error")
	}
}

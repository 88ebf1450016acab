package benchrun

import (
	"os"
	"testing"
)

const canStatus = `Name:	galleon-file
Umask:	0022
State:	S (sleeping)
VmPeak:	 1300352 kB
VmHWM:	   35120 kB
VmRSS:	   33944 kB
Threads:	7
`

func TestStatusKB(t *testing.T) {
	for field, want := range map[string]int64{"VmHWM": 35120, "VmRSS": 33944, "VmPeak": 1300352} {
		if got, err := StatusKB(canStatus, field); err != nil || got != want {
			t.Errorf("StatusKB(%s) = %d, %v; want %d", field, got, err, want)
		}
	}
	if _, err := StatusKB(canStatus, "VmSwap"); err == nil {
		t.Error("StatusKB(VmSwap): no error for a missing field")
	}
}

func TestStatTicks(t *testing.T) {
	// A command name with a space and a parenthesis: fields are counted after the last ") ".
	stat := "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 1000 0 0 0 713 289 0 0 20 0 7 0 12345 1300352000 8486 18446744073709551615\n"
	if got, err := StatTicks(stat); err != nil || got != 713+289 {
		t.Errorf("StatTicks = %d, %v; want %d", got, err, 713+289)
	}
	if _, err := StatTicks("4242 (x) S 1 2"); err == nil {
		t.Error("StatTicks of a short line: no error")
	}
	self, err := CPUTicks(os.Getpid())
	if err != nil || self < 0 {
		t.Errorf("CPUTicks(self) = %d, %v", self, err)
	}
}

func TestStatMachineTicks(t *testing.T) {
	stat := "cpu  100 5 50 1000 20 0 3 0 0 0\ncpu0 50 2 25 500 10 0 1 0 0 0\nintr 1\n"
	busy, total, err := StatMachineTicks(stat)
	if err != nil || total != 1178 || busy != 1178-1000-20 {
		t.Errorf("StatMachineTicks = %d %d %v; want 158 1178", busy, total, err)
	}
	if _, _, err := StatMachineTicks("intr 1\n"); err == nil {
		t.Error("StatMachineTicks without a cpu line: no error")
	}
}

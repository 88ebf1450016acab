package consultest

import "syscall"

// sysProcAttr kills consul when the test binary dies (Pdeathsig), so an interrupted test run
// leaves no agent behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

package zktest

import "syscall"

// sysProcAttr kills the server when the test binary dies (Pdeathsig), so an interrupted test run
// leaves no JVM behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

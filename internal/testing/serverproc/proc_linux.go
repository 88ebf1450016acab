package serverproc

import "syscall"

// sysProcAttr kills the server when the test binary dies (Pdeathsig).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

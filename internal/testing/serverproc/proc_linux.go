package serverproc

import "syscall"

// sysProcAttr kills the server when the test binary dies (Pdeathsig), unless d.Outlive.
func sysProcAttr(d Detach) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setsid: d.Session}
	if !d.Outlive {
		attr.Pdeathsig = syscall.SIGKILL
	}
	return attr
}

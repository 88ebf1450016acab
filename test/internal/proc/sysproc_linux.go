package proc

import "syscall"

// sysProcAttr kills the child when the test binary dies without running its cleanups
// (e.g. `go test -timeout` panics or a SIGKILL), so no server outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

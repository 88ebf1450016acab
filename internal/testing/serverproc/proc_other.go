//go:build !linux

package serverproc

import "syscall"

// sysProcAttr: without Pdeathsig a server outlives a test binary that dies whatever d says.
func sysProcAttr(d Detach) *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: d.Session} }

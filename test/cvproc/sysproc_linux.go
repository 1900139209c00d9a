package cvproc

import "syscall"

// sysProcAttr makes a child process die with the test process, so that a
// killed test leaves no converge processes behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

package stress

import "syscall"

// procAttr makes a child process die with the test process, so that a
// killed test leaves no converge processes behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

//go:build !linux

package cvproc

import "syscall"

// sysProcAttr sets nothing where the child cannot be tied to the parent.
func sysProcAttr() *syscall.SysProcAttr { return nil }

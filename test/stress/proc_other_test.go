//go:build !linux

package stress

import "syscall"

func procAttr() *syscall.SysProcAttr { return nil }

package control

import "syscall"

// System call numbers on x86-64 that package syscall does not wrap.
const (
	sysRenameat2 = 316
	sysFstatat   = syscall.SYS_NEWFSTATAT
)

package control

import "syscall"

// System call numbers on arm64 that package syscall does not wrap.
const (
	sysRenameat2 = 276
	sysFstatat   = syscall.SYS_FSTATAT
)

package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// clockBoottime is CLOCK_BOOTTIME, the clock /proc/<pid>/stat's starttime counts on (Linux ≥ 5.5).
const clockBoottime = 7

// userHz is the unit of /proc/<pid>/stat's starttime, ticks per second (USER_HZ, 100 on Linux).
const userHz = 100

// msSinceProcessStart is the time since the kernel started this process
// (starttime of /proc/self/stat against CLOCK_BOOTTIME), ms, to 10 ms; -1 when unreadable.
// It counts what happens before main: exec, paging the binary in and the Go runtime's start.
func msSinceProcessStart() int64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return -1
	}
	start, err := strconv.ParseInt(f[19], 10, 64) // field 22 of proc(5): starttime
	if err != nil {
		return -1
	}
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockBoottime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return -1
	}
	return ts.Nano()/1e6 - start*1000/userHz
}

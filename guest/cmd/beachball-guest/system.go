package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// enterRoot is chroot(dir) then chdir("/").
func enterRoot(dir string) error {
	if err := syscall.Chroot(dir); err != nil {
		return &os.PathError{Op: "chroot", Path: dir, Err: err}
	}
	return syscall.Chdir("/")
}

// uptime is the kernel's uptime in seconds as /proc/uptime prints it, "?" when unreadable.
func uptime() string {
	b, err := os.ReadFile("/proc/uptime")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// vmRSS is this process's resident set as /proc/self/status prints it ("1234 kB"), "?" when unreadable.
func vmRSS() string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
		}
	}
	return "?"
}

// stepTimes records how long each startup step took, for the guest_ready console line.
type stepTimes struct {
	last  time.Time
	steps []string
}

func newStepTimes(start time.Time) *stepTimes { return &stepTimes{last: start} }

// mark ends the step called name (it ran since the previous mark).
func (t *stepTimes) mark(name string) {
	now := time.Now()
	t.steps = append(t.steps, fmt.Sprintf("%s %d", name, now.Sub(t.last).Milliseconds()))
	t.last = now
}

// String is "name ms, name ms, ...".
func (t *stepTimes) String() string { return strings.Join(t.steps, ", ") }

// Package console writes the guest's lines and the workload's output to
// the VM's console (/dev/console, the serial port the host logs), or to
// stderr in test mode or when /dev/console cannot be opened.
// Must never: write payload bytes (only the workload itself prints).
package console

import (
	"os"
	"sync"
)

// DevConsole is the console device inside a VM.
const DevConsole = "/dev/console"

var (
	mu     sync.Mutex
	stderr bool
)

// UseStderr sends every console line and workload output to stderr (test mode).
func UseStderr() {
	mu.Lock()
	stderr = true
	mu.Unlock()
}

// Open returns a writable console file and the function that releases it
// (stderr is never closed).
func Open() (*os.File, func()) {
	mu.Lock()
	s := stderr
	mu.Unlock()
	if !s {
		if f, err := os.OpenFile(DevConsole, os.O_WRONLY|os.O_APPEND, 0); err == nil {
			return f, func() { f.Close() }
		}
	}
	return os.Stderr, func() {}
}

// Line writes text and a newline to the console in one write.
func Line(text string) {
	f, release := Open()
	defer release()
	f.Write([]byte(text + "\n"))
}

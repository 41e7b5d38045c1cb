// Package pid1 does what the first process of a VM owes the system: reap
// every exited child, orphans included (wait4(-1)), forward termination
// signals to the workload, and power off with sync(2) and reboot(2).
// The reaper is also how the guest learns its workload's exit status: the
// guest never calls Wait on a child itself, so an orphan reap cannot steal it.
// Must never: call reboot(2) without sync(2) first.
package pid1

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// ReapInterval is how often the reaper looks for exited children even without SIGCHLD (signals coalesce).
const ReapInterval = time.Second

// Reaper collects every exited child of this process and reports the ones started through it.
type Reaper struct {
	mu      sync.Mutex
	watched map[int]func(syscall.WaitStatus)
}

// NewReaper starts reaping on SIGCHLD and every ReapInterval.
func NewReaper() *Reaper {
	r := &Reaper{watched: map[int]func(syscall.WaitStatus){}}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	go func() {
		t := time.NewTicker(ReapInterval)
		for {
			select {
			case <-ch:
			case <-t.C:
			}
			r.reapAll()
		}
	}()
	return r
}

// Start runs start (which starts one process and returns its PID) with
// reaping held off, so the child cannot be reaped before onExit is
// registered for it; onExit runs once, on its own goroutine, with the wait status.
func (r *Reaper) Start(start func() (int, error), onExit func(syscall.WaitStatus)) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err == nil {
		r.watched[pid] = onExit
	}
	return pid, err
}

func (r *Reaper) reapAll() {
	for {
		r.mu.Lock()
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			r.mu.Unlock()
			continue
		}
		if err != nil || pid <= 0 {
			r.mu.Unlock()
			return
		}
		cb := r.watched[pid]
		delete(r.watched, pid)
		r.mu.Unlock()
		if cb != nil {
			go cb(ws)
		}
	}
}

// ExitCode is the shell's view of a wait status: the exit code, or 128 + the signal number when killed.
func ExitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

package control

import (
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ExecStart is the body of POST /v1/execs (ExecStartBody in src/protocol/control.ts).
type ExecStart struct {
	Argv           []string          `json:"argv,omitempty"`
	Shell          string            `json:"shell,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	User           string            `json:"user,omitempty"`
	TimeoutSeconds int               `json:"timeoutSeconds,omitempty"`
	Pty            *PtySize          `json:"pty,omitempty"`
	Stdin          bool              `json:"stdin,omitempty"`
}

// PtySize is a terminal's size in character cells (ExecResizeBody).
type PtySize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// ExecView is one exec as the routes answer it (ExecView in src/protocol/control.ts).
type ExecView struct {
	ExecID          string           `json:"execId"`
	Argv            []string         `json:"argv"`
	Pty             bool             `json:"pty"`
	State           string           `json:"state"`
	Pid             int              `json:"pid"`
	ExitCode        *int             `json:"exitCode"`
	Signal          *string          `json:"signal"`
	TimedOut        bool             `json:"timedOut"`
	StartedAtMs     int64            `json:"startedAtMs"`
	EndedAtMs       *int64           `json:"endedAtMs"`
	OutputBytes     map[string]int64 `json:"outputBytes"`
	OutputTruncated bool             `json:"outputTruncated"`
	StdinOffset     int64            `json:"stdinOffset"`
	StdinOpen       bool             `json:"stdinOpen"`
}

// execProc is one running or exited exec, owned by the tenant that started it.
type execProc struct {
	id, tenant string
	dir        string
	argv       []string
	cmd        *exec.Cmd
	pty        *os.File // the terminal's master side, for a PTY exec
	logs       map[string]*outputLog
	timer      *time.Timer

	stdinMu sync.Mutex // serialises stdin writers (held across a write that may block on a full pipe)

	mu          sync.Mutex // guards what follows; never held across blocking I/O
	stdin       *os.File   // pipe write end, or the PTY master; nil once closed
	stdinOffset int64
	changed     chan struct{} // closed and replaced on every change (output, exit, stdin)
	exited      bool
	exitCode    *int
	signal      *string
	timedOut    bool
	started     time.Time
	ended       *time.Time
}

// notify wakes every reader waiting on the exec.
func (e *execProc) notify() {
	e.mu.Lock()
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

// view is the exec's ExecView now.
func (e *execProc) view() ExecView {
	e.mu.Lock()
	defer e.mu.Unlock()
	stdinOffset, stdinOpen := e.stdinOffset, e.stdin != nil
	v := ExecView{ExecID: e.id, Argv: e.argv, Pty: e.pty != nil, State: "running", Pid: e.cmd.Process.Pid,
		ExitCode: e.exitCode, Signal: e.signal, TimedOut: e.timedOut, StartedAtMs: e.started.UnixMilli(),
		OutputBytes: map[string]int64{}, StdinOffset: stdinOffset, StdinOpen: stdinOpen}
	if e.exited {
		v.State = "exited"
		ms := e.ended.UnixMilli()
		v.EndedAtMs = &ms
	}
	for name, l := range e.logs {
		size, trunc := l.state()
		v.OutputBytes[name] = size
		v.OutputTruncated = v.OutputTruncated || trunc
	}
	return v
}

// wait reaps the process itself (no Config.StartChild: the service is not under a PID-1 reaper).
func (e *execProc) wait(pumps *sync.WaitGroup) {
	_ = e.cmd.Wait()
	ws, _ := e.cmd.ProcessState.Sys().(syscall.WaitStatus)
	e.finish(ws, pumps)
}

// finish records the wait status once the output drained (up to ExitDrainGrace after the reap).
func (e *execProc) finish(ws syscall.WaitStatus, pumps *sync.WaitGroup) {
	if e.timer != nil {
		e.timer.Stop()
	}
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(ExitDrainGrace):
	}
	now := time.Now()
	e.mu.Lock()
	if ws.Signaled() {
		name := signalName(ws.Signal())
		e.signal = &name
	} else {
		code := ws.ExitStatus()
		e.exitCode = &code
	}
	e.exited, e.ended = true, &now
	f := e.stdin
	e.stdin = nil
	e.mu.Unlock()
	if f != nil && e.pty == nil {
		_ = f.Close() // a write blocked on it (a child that never reads) returns an error now
	}
	e.notify()
}

// kill sends sig to the exec's process group (the exec leads its own group or session).
func (e *execProc) kill(sig syscall.Signal) error {
	e.mu.Lock()
	exited := e.exited
	e.mu.Unlock()
	if exited {
		return fail("EXEC_STATE_CONFLICT", "exec %s has exited", e.id)
	}
	pid := e.cmd.Process.Pid
	if err := syscall.Kill(-pid, sig); err != nil && err != syscall.ESRCH {
		return fail("INTERNAL", "signalling exec %s: %v", e.id, err)
	}
	return nil
}

// signals are the names a client may send (ExecSignal in src/protocol/control.ts).
var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT,
	"STOP": syscall.SIGSTOP, "TSTP": syscall.SIGTSTP, "WINCH": syscall.SIGWINCH,
	"PIPE": syscall.SIGPIPE, "ALRM": syscall.SIGALRM, "ABRT": syscall.SIGABRT, "SEGV": syscall.SIGSEGV,
}

// signalName is a signal's name without SIG (`KILL`), or its number as text.
func signalName(s syscall.Signal) string {
	for name, v := range signals {
		if v == s {
			return name
		}
	}
	return "SIG" + strconv.Itoa(int(s))
}

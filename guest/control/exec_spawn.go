package control

import (
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// spawn starts e.cmd with its output pumped into logs: stdout and stderr through pipes, or one
// `pty` log read from a terminal's master side (the child gets the slave as its controlling tty).
// With startChild (Config.StartChild) the child is started through the PID-1 reaper and its
// status comes from there; otherwise the service waits for it itself.
func (e *execProc) spawn(b *ExecStart, t *execTable) error {
	var readers []io.Reader
	var names []string
	var parentClose []*os.File
	closeAll := func() {
		for _, f := range parentClose {
			_ = f.Close()
		}
	}
	if b.Pty != nil {
		master, slave, err := openPty(b.Pty.Cols, b.Pty.Rows)
		if err != nil {
			return fail("EXEC_START_FAILED", "opening a terminal: %v", err)
		}
		e.cmd.Stdin, e.cmd.Stdout, e.cmd.Stderr = slave, slave, slave
		e.cmd.SysProcAttr.Setsid, e.cmd.SysProcAttr.Setctty, e.cmd.SysProcAttr.Ctty = true, true, 0
		e.pty, e.stdin = master, master
		parentClose = append(parentClose, slave)
		readers, names = append(readers, master), append(names, "pty")
	} else {
		for _, name := range []string{"stdout", "stderr"} {
			r, w, err := os.Pipe()
			if err != nil {
				closeAll()
				return fail("INTERNAL", "making a pipe: %v", err)
			}
			if name == "stdout" {
				e.cmd.Stdout = w
			} else {
				e.cmd.Stderr = w
			}
			parentClose = append(parentClose, w)
			readers, names = append(readers, r), append(names, name)
		}
		if b.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				closeAll()
				return fail("INTERNAL", "making a pipe: %v", err)
			}
			e.cmd.Stdin, e.stdin = r, w
			parentClose = append(parentClose, r)
		}
	}
	for _, name := range names {
		l, err := newOutputLog(filepath.Join(e.dir, name), e.notify)
		if err != nil {
			closeAll()
			return fail("INTERNAL", "making the %s log: %v", name, err)
		}
		e.logs[name] = l
	}
	var pumps sync.WaitGroup
	pumps.Add(len(names)) // before the start: a reaper may report the exit before the pumps run
	var startErr error
	if t.startChild != nil {
		_, startErr = t.startChild(func() (int, error) {
			if err := e.cmd.Start(); err != nil {
				return 0, err
			}
			return e.cmd.Process.Pid, nil
		}, func(ws syscall.WaitStatus) { e.finish(ws, &pumps) })
	} else {
		startErr = e.cmd.Start()
	}
	if err := startErr; err != nil {
		closeAll()
		for _, r := range readers {
			_ = r.(*os.File).Close()
		}
		if e.stdin != nil && e.pty == nil {
			_ = e.stdin.Close()
		}
		return fail("EXEC_START_FAILED", "starting %s: %v", e.cmd.Path, err)
	}
	closeAll()
	for i, name := range names {
		go func(r io.Reader, l *outputLog) {
			defer pumps.Done()
			l.pump(r)
			_ = r.(*os.File).Close()
		}(readers[i], e.logs[name])
	}
	if b.TimeoutSeconds > 0 {
		e.timer = time.AfterFunc(time.Duration(b.TimeoutSeconds)*time.Second, func() {
			e.mu.Lock()
			e.timedOut = !e.exited
			e.mu.Unlock()
			_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
		})
	}
	if t.startChild == nil {
		go e.wait(&pumps)
	}
	return nil
}

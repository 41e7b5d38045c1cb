package workload

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"beachball/guest/internal/console"
	"beachball/guest/internal/pid1"
	"beachball/guest/internal/wire"
)

// BootstrapDir is the tmpfs directory that holds a stored payload.
const BootstrapDir = "/run/beachball"

// BootstrapFileName is the stored payload's name inside BootstrapDir.
const BootstrapFileName = "bootstrap"

// Running is a started workload.
type Running struct {
	// PID is the workload's process ID.
	PID int
	// Exited receives the exit code (128 + signal number when killed) once, after JOB_EXIT is on the console.
	Exited <-chan int
	once   sync.Once
	done   chan struct{}
}

// Signal sends sig to the workload; a workload that already exited is left alone.
func (r *Running) Signal(sig syscall.Signal) {
	select {
	case <-r.done:
	default:
		syscall.Kill(r.PID, sig)
	}
}

// Done is closed once the workload has exited.
func (r *Running) Done() <-chan struct{} { return r.done }

// StorePayload writes payload to dir/bootstrap (mode 0400, owned by uid:gid), creating dir (0711); it returns the file's path.
func StorePayload(dir string, payload []byte, uid, gid uint32) (string, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", err
	}
	path := filepath.Join(dir, BootstrapFileName)
	os.Remove(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o400)
	if err != nil {
		return "", err
	}
	_, werr := f.Write(payload)
	cerr := f.Close()
	if werr != nil {
		return "", werr
	}
	if cerr != nil {
		return "", cerr
	}
	return path, os.Chown(path, int(uid), int(gid))
}

// Start runs plan for payload: writes JOB_START to the console, stores the
// payload (in bootstrapDir) or feeds it on stdin, starts the command with
// stdout and stderr on the console through reaper, and once it exits writes
// `JOB_EXIT <code>`. When the command cannot be started it writes the reason
// and `JOB_EXIT 127` and fails.
func Start(plan Plan, payload []byte, contentType, bootstrapDir string, reaper *pid1.Reaper) (*Running, error) {
	out, release := console.Open()
	fmt.Fprintf(out, "%s\n", wire.JobStartMarker)
	fail := func(err error) (*Running, error) {
		arg0 := ""
		if len(plan.Command.Argv) > 0 {
			arg0 = plan.Command.Argv[0]
		}
		fmt.Fprintf(out, "beachball-guest: cannot start %q: %v\n%s 127\n", arg0, err, wire.JobExitMarker)
		release()
		return nil, err
	}
	c := plan.Command
	env := append([]string{}, c.Env...)
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		return fail(err)
	}
	var feed *os.File
	if c.StoresPayload {
		path, err := StorePayload(bootstrapDir, payload, c.UID, c.GID)
		if err != nil {
			stdin.Close()
			return fail(err)
		}
		env = append(env, wire.BootstrapPathEnv+"="+path, wire.BootstrapContentTypeEnv+"="+contentType)
	} else {
		stdin.Close()
		var w *os.File
		if stdin, w, err = os.Pipe(); err != nil {
			return fail(err)
		}
		feed = w
	}
	attr := &os.ProcAttr{Dir: c.Dir, Env: env, Files: []*os.File{stdin, out, out}, Sys: &syscall.SysProcAttr{}}
	if c.UID != 0 || c.GID != 0 {
		attr.Sys.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: []uint32{}}
	}
	exited := make(chan int, 1)
	r := &Running{Exited: exited, done: make(chan struct{})}
	pid, err := reaper.Start(func() (int, error) {
		p, err := os.StartProcess(c.Argv[0], c.Argv, attr)
		if err != nil {
			return 0, err
		}
		return p.Pid, nil
	}, func(ws syscall.WaitStatus) {
		code := pid1.ExitCode(ws)
		close(r.done)
		fmt.Fprintf(out, "%s %d\n", wire.JobExitMarker, code)
		release()
		exited <- code
	})
	stdin.Close()
	if err != nil {
		if feed != nil {
			feed.Close()
		}
		return fail(err)
	}
	r.PID = pid
	if feed != nil {
		go func() {
			feed.Write(payload)
			feed.Close()
		}()
	}
	return r, nil
}

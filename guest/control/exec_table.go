package control

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// execTable holds every exec (at most MaxExecs), in start order.
type execTable struct {
	runDir     string
	startChild StartChildFunc
	mu         sync.Mutex
	byID       map[string]*execProc
	order      []string
}

func newExecTable(runDir string, startChild StartChildFunc) *execTable {
	return &execTable{runDir: runDir, startChild: startChild, byID: map[string]*execProc{}}
}

// get is the tenant's exec id; EXEC_NOT_FOUND for an unknown ID and for another tenant's.
func (t *execTable) get(id, tenant string) (*execProc, error) {
	t.mu.Lock()
	e := t.byID[id]
	t.mu.Unlock()
	if e == nil || e.tenant != tenant {
		return nil, fail("EXEC_NOT_FOUND", "no exec %q", id)
	}
	return e, nil
}

// list is the tenant's execs, oldest first.
func (t *execTable) list(tenant string) []*execProc {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := []*execProc{}
	for _, id := range t.order {
		if e := t.byID[id]; e.tenant == tenant {
			out = append(out, e)
		}
	}
	return out
}

// remove forgets an exited exec and deletes its output logs (EXEC_STATE_CONFLICT while it runs).
func (t *execTable) remove(e *execProc) error {
	e.mu.Lock()
	exited := e.exited
	e.mu.Unlock()
	if !exited {
		return fail("EXEC_STATE_CONFLICT", "exec %s is running; signal it first", e.id)
	}
	t.mu.Lock()
	delete(t.byID, e.id)
	for i, id := range t.order {
		if id == e.id {
			t.order = append(t.order[:i], t.order[i+1:]...)
			break
		}
	}
	t.mu.Unlock()
	for _, l := range e.logs {
		l.remove()
	}
	_ = os.RemoveAll(e.dir)
	return nil
}

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkStart enforces ExecStartBody's bounds (TOO_LARGE) and shape (VALIDATION_FAILED).
func checkStart(b *ExecStart) error {
	if (len(b.Argv) == 0) == (b.Shell == "") {
		return fail("VALIDATION_FAILED", "give exactly one of argv and shell")
	}
	if len(b.Argv) > MaxExecArgs {
		return fail("TOO_LARGE", "argv has %d entries, at most %d (MAX_EXEC_ARGS)", len(b.Argv), MaxExecArgs)
	}
	for _, a := range append([]string{b.Shell, b.Cwd, b.User}, b.Argv...) {
		if len(a) > MaxExecArgBytes {
			return fail("TOO_LARGE", "an argument is %d bytes, at most %d (MAX_EXEC_ARG_BYTES)", len(a), MaxExecArgBytes)
		}
		if strings.IndexByte(a, 0) >= 0 {
			return fail("VALIDATION_FAILED", "an argument holds a NUL byte")
		}
	}
	if len(b.Env) > MaxExecEnv {
		return fail("TOO_LARGE", "env has %d variables, at most %d (MAX_EXEC_ENV)", len(b.Env), MaxExecEnv)
	}
	for k, v := range b.Env {
		if len(v) > MaxExecEnvValueBytes {
			return fail("TOO_LARGE", "env %s is %d bytes, at most %d (MAX_EXEC_ENV_VALUE_BYTES)", k, len(v), MaxExecEnvValueBytes)
		}
		if !envNameRe.MatchString(k) || len(k) > 256 || strings.IndexByte(v, 0) >= 0 {
			return fail("VALIDATION_FAILED", "env name %q is not a variable name (or its value holds NUL)", k)
		}
	}
	if b.Cwd != "" && !strings.HasPrefix(b.Cwd, "/") {
		return fail("VALIDATION_FAILED", "cwd must be absolute")
	}
	if b.TimeoutSeconds < 0 || b.TimeoutSeconds > MaxExecTimeoutSeconds {
		return fail("VALIDATION_FAILED", "timeoutSeconds must be 1..%d", MaxExecTimeoutSeconds)
	}
	if b.Pty != nil && (b.Pty.Cols < 1 || b.Pty.Rows < 1 || b.Pty.Cols > MaxPtyDimension || b.Pty.Rows > MaxPtyDimension) {
		return fail("VALIDATION_FAILED", "pty cols and rows must be 1..%d", MaxPtyDimension)
	}
	return nil
}

// lookPath finds argv0 on the exec's PATH (as execvp would); EXEC_START_FAILED when absent.
func lookPath(argv0, path string) (string, error) {
	if strings.Contains(argv0, "/") {
		return argv0, nil
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, argv0)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fail("EXEC_START_FAILED", "no program %q on PATH %s", argv0, path)
}

// start runs a checked exec for tenant: its own process group (or session, for a PTY), output logs
// under runDir/execs/<id>/, the timeout armed. TOO_LARGE at MaxExecs; EXEC_START_FAILED when it cannot run.
func (t *execTable) start(b *ExecStart, tenant string) (*execProc, error) {
	if err := checkStart(b); err != nil {
		return nil, err
	}
	t.mu.Lock()
	n := len(t.byID)
	t.mu.Unlock()
	if n >= MaxExecs {
		return nil, fail("TOO_LARGE", "%d execs are kept, at most %d (MAX_EXECS): remove exited ones", n, MaxExecs)
	}
	argv := b.Argv
	if b.Shell != "" {
		argv = []string{"/bin/sh", "-c", b.Shell}
	}
	env := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd := &exec.Cmd{SysProcAttr: &syscall.SysProcAttr{Setpgid: b.Pty == nil}}
	home := "/"
	if b.User != "" {
		u, err := lookupUser(b.User)
		if err != nil {
			return nil, err
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
		home, env["USER"], env["LOGNAME"] = u.Home, u.Name, u.Name
	} else if h, err := os.UserHomeDir(); err == nil {
		home = h
	}
	env["HOME"] = home
	if b.Pty != nil {
		env["TERM"] = "xterm-256color"
	}
	for k, v := range b.Env {
		env[k] = v
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	prog, err := lookPath(argv[0], env["PATH"])
	if err != nil {
		return nil, err
	}
	cmd.Path, cmd.Args, cmd.Dir = prog, argv, b.Cwd
	if cmd.Dir == "" {
		cmd.Dir = home
		if st, err := os.Stat(home); err != nil || !st.IsDir() {
			cmd.Dir = "/"
		}
	}
	var idb [16]byte
	_, _ = rand.Read(idb[:])
	e := &execProc{id: "exec_" + hex.EncodeToString(idb[:]), tenant: tenant, argv: argv, cmd: cmd,
		logs: map[string]*outputLog{}, changed: make(chan struct{}), started: time.Now()}
	e.dir = filepath.Join(t.runDir, "execs", e.id)
	if err := os.MkdirAll(e.dir, 0o700); err != nil {
		return nil, fail("INTERNAL", "making the exec's log directory: %v", err)
	}
	if err := e.spawn(b, t); err != nil {
		for _, l := range e.logs {
			l.remove()
		}
		_ = os.RemoveAll(e.dir)
		return nil, err
	}
	t.mu.Lock()
	t.byID[e.id] = e
	t.order = append(t.order, e.id)
	t.mu.Unlock()
	return e, nil
}

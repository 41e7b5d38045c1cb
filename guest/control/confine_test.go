package control

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Each way out of an allowed root is PATH_ESCAPE, with openat2 and with the O_NOFOLLOW fallback.
func TestPathEscapesAreRefusedWithAndWithoutOpenat2(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "d"), 0o755)
	os.WriteFile(filepath.Join(root, "d", "f"), []byte("x"), 0o644)
	os.Symlink("/etc", filepath.Join(root, "abs"))
	os.Symlink("../../../../../../..", filepath.Join(root, "up"))
	for _, with := range []bool{true, false} {
		haveOpenat2 = with
		for _, p := range []string{root + "/../x", "/etc/passwd", "relative", root + "/abs/passwd", root + "/up/etc/passwd"} {
			c, err := confine([]string{root}, p)
			if err == nil {
				_, err = statPath(c)
			}
			if e, ok := err.(*Error); !ok || e.Code != "PATH_ESCAPE" {
				t.Errorf("openat2=%v %s: %v, want PATH_ESCAPE", with, p, err)
			}
		}
		c, _ := confine([]string{root}, root+"/d/f")
		if st, err := statPath(c); err != nil || st.Kind != "file" {
			t.Errorf("openat2=%v: a path inside the root: %v %v", with, st, err)
		}
	}
	haveOpenat2 = true
}

// With Config.StartChild the exit status comes from the reaper, not from the service's own wait.
func TestExecsStartThroughAPid1Reaper(t *testing.T) {
	reaped := make(chan int, 1)
	start := func(start func() (int, error), onExit func(syscall.WaitStatus)) (int, error) {
		pid, err := start()
		if err == nil {
			go func() {
				var ws syscall.WaitStatus
				syscall.Wait4(pid, &ws, 0, nil)
				reaped <- pid
				onExit(ws)
			}()
		}
		return pid, err
	}
	tbl := newExecTable(t.TempDir(), start)
	e, err := tbl.start(&ExecStart{Shell: "exit 5"}, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if pid := <-reaped; pid != e.cmd.Process.Pid {
		t.Fatalf("reaped %d, started %d", pid, e.cmd.Process.Pid)
	}
	for i := 0; i < 500 && e.view().State != "exited"; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if v := e.view(); v.ExitCode == nil || *v.ExitCode != 5 {
		t.Fatalf("view %+v, want exit code 5", v)
	}
}

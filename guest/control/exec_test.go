package control

import (
	"syscall"
	"testing"
	"time"
)

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

// A stdin write blocked on a full pipe (a daemonised child holds stdin and never reads) holds up
// neither the exec's view nor its exit: the exit closes the pipe and the write returns.
func TestABlockedStdinWriteNeverBlocksTheViewOrTheExit(t *testing.T) {
	tbl := newExecTable(t.TempDir(), nil)
	e, err := tbl.start(&ExecStart{Shell: "exec 3<&0; sleep 30 <&3 >/dev/null 2>&1 & exit 0", Stdin: true}, "t1")
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
	wrote := make(chan error, 1)
	go func() {
		_, err := e.takeStdin(0, make([]byte, MaxStdinWriteBytes), false)
		wrote <- err
	}()
	for e.view().State != "exited" { // view() must answer while the write is blocked
		time.Sleep(20 * time.Millisecond)
	}
	if err := <-wrote; err == nil {
		t.Fatalf("the blocked write succeeded after exit")
	}
}

package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"beachball/guest/control"
	"beachball/guest/internal/console"
	"beachball/guest/internal/pid1"
	"beachball/guest/internal/wire"
)

// ControlPort is the control service's TCP port (src/protocol/control.ts GUEST_CONTROL_PORT).
const ControlPort = 7390

// ControlRoots are the directories the control service's file routes may
// touch, and below (docs/exec-and-files.md "Allowed roots in a VM"): the
// places a workload keeps its own files. System directories (/etc, /usr,
// /proc...) stay out of reach of `bb cp`; exec can still read them.
var ControlRoots = []string{"/root", "/home", "/srv", "/opt", "/workspace", "/tmp", "/var/tmp"}

// ControlRunDirs are the candidate run dirs of the control service (exec output logs), tried in order:
// the root disk first (output is kept up to 64 MiB per exec, too much for a tmpfs in a small guest), then /run's tmpfs.
var ControlRunDirs = []string{"/var/lib/beachball/control", "/run/beachball-control"}

// ListenRetry is the pause between attempts to listen on the control port while the network is not yet up.
const ListenRetry = 100 * time.Millisecond

// MaxListenAttempts bounds those attempts (50 s at ListenRetry); after them the guest runs without a control service.
const MaxListenAttempts = 500

// controlRunDir creates and returns the first usable directory of candidates (mode 0700).
func controlRunDir(candidates []string) (string, error) {
	var last error
	for _, d := range candidates {
		if err := os.MkdirAll(filepath.Join(d, "execs"), 0o700); err != nil {
			last = err
			continue
		}
		probe := filepath.Join(d, ".probe")
		if err := os.WriteFile(probe, nil, 0o600); err != nil {
			last = err
			continue
		}
		os.Remove(probe)
		return d, nil
	}
	return "", fmt.Errorf("no writable control run dir among %v: %v", candidates, last)
}

// newControl makes the control service for this boot: the guest's identity,
// ControlRoots, a run dir from runDirs, and every exec started through the
// PID-1 reaper (so its wait4(-1) cannot take an exec's status).
// loopbackTesting (test mode only) skips the peer-address check, as control-dev's flag does.
func newControl(id wire.Identity, reaper *pid1.Reaper, runDirs []string, loopbackTesting bool) (*control.Server, error) {
	dir, err := controlRunDir(runDirs)
	if err != nil {
		return nil, err
	}
	return control.New(control.Config{AllocationID: id.AllocationID, Generation: int64(id.Generation),
		Roots: ControlRoots, RunDir: dir, StartChild: reaper.Start, LoopbackTesting: loopbackTesting}), nil
}

// listenControl listens on addr (TCP, every address of the guest: the
// private address may be configured after the guest starts), retrying
// every ListenRetry up to attempts times.
func listenControl(addr string, attempts int) (net.Listener, error) {
	var err error
	for i := 0; i < attempts; i++ {
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			return l, nil
		}
		time.Sleep(ListenRetry)
	}
	return nil, err
}

// serveControl listens on addr and serves srv there, logging to the console. The first
// attempt (which succeeds at once on a wildcard address) and its console line happen before
// it returns, so the line is written before guest_ready, never among a workload's output;
// only retries and serving run in the background.
func serveControl(srv *control.Server, addr string) {
	l, err := net.Listen("tcp", addr)
	if err == nil {
		console.Line("beachball-guest: control service on " + l.Addr().String())
	}
	go func() {
		if err != nil {
			if l, err = listenControl(addr, MaxListenAttempts); err != nil {
				console.Line("beachball-guest: control service not started: " + err.Error())
				return
			}
		}
		console.Line("beachball-guest: control service stopped: " + srv.Serve(l).Error())
	}()
}

// controlAddr is the control service's listen address: [::]:7390 (both families) in a VM,
// or the test-mode address in testControlEnv.
func controlAddr() string {
	if a := os.Getenv(testControlEnv); a != "" {
		return a
	}
	return net.JoinHostPort("::", strconv.Itoa(ControlPort))
}

// Command beachball-guest is the guest bootstrap, PID 1 inside a Beachball
// VM (dev image and images converted from OCI) or a systemd service (the
// reference image): it announces the guest over the virtio-serial `ctl`
// port, answers the host, runs the one payload of the boot and powers off
// on request (docs/adr/0170-static-go-guest.md; spec "Guest handshake").
//
// Usage: `beachball-guest [guest] [--workload-root DIR] [--configure-network]`;
// a bad argument is a usage error (exit 2, src/command/usageText.ts's text
// form). With --workload-root (squashfs images: the initramfs mounted the
// workload's root there) it enters that root with chroot(2) once the port is
// open. With --configure-network (PID 1 only) it first configures the network
// of the kernel command line and writes the root's resolv.conf
// (guest/internal/netconf), as the squashfs images' initramfs asks.
//
// Test mode (test/guest-contract.test.ts): BEACHBALL_GUEST_TEST_SOCKET names a
// Unix socket to use instead of the port, BEACHBALL_GUEST_TEST_CMDLINE a file
// instead of /proc/cmdline; console lines go to stderr and shutdown exits
// instead of reboot(2); a restored message's entropy and clock step are
// recorded and reported on the console, never applied (restore.Recorder).
// Refused when the process is PID 1.
// BEACHBALL_GUEST_TEST_CONTROL (test mode only) is a TCP address for the
// control service; without it test mode starts none. In a VM the control
// service (guest/control) listens on [::]:7390, takes its keys from each
// control_config and starts execs through the PID-1 reaper (control.go).
// Must never: exit while it is PID 1 and the VM runs (that panics the kernel),
// except at startup when it cannot work at all (then QEMU exits: panic=1, -no-reboot).
package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"beachball/guest/internal/boot"
	"beachball/guest/internal/channel"
	"beachball/guest/internal/console"
	"beachball/guest/internal/identity"
	"beachball/guest/internal/keys"
	"beachball/guest/internal/netconf"
	"beachball/guest/internal/pid1"
	"beachball/guest/internal/restore"
	"beachball/guest/internal/sysinit"
	"beachball/guest/internal/wire"
	"beachball/guest/internal/workload"
)

// Test-mode environment variables (never set inside a VM).
const (
	testSocketEnv  = "BEACHBALL_GUEST_TEST_SOCKET"
	testCmdlineEnv = "BEACHBALL_GUEST_TEST_CMDLINE"
	// testControlEnv is the control service's listen address in test mode (default: none started).
	testControlEnv = "BEACHBALL_GUEST_TEST_CONTROL"
)

// PortWait is how long to wait for the control port to appear at boot.
const PortWait = 10 * time.Second

// exitUsage is the exit code of a usage error (src/command/run.ts EXIT.usage).
const exitUsage = 2

func usage(msg string) {
	fmt.Fprintf(os.Stderr, "error: %s\n", msg)
	os.Exit(exitUsage)
}

// parseArgs reads `[guest] [--workload-root DIR] [--configure-network]`; it exits 2 on anything else.
func parseArgs(args []string) (workloadRoot string, configureNetwork bool) {
	if len(args) > 0 && args[0] == "guest" {
		args = args[1:]
	}
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--workload-root" && i+1 < len(args):
			i++
			workloadRoot = args[i]
		case strings.HasPrefix(a, "--workload-root="):
			workloadRoot = strings.TrimPrefix(a, "--workload-root=")
		case a == "--configure-network":
			configureNetwork = true
		default:
			usage(fmt.Sprintf("beachball-guest: unknown argument %q", a))
		}
	}
	return workloadRoot, configureNetwork
}

func fatal(err error) {
	console.Line("beachball-guest: " + err.Error())
	os.Exit(1)
}

// InitName is the program name under which the guest is also the system's init (sysinit).
const InitName = "beachball-init"

// systemInit mounts the file systems when mounts is set, and configures the
// network of the kernel command line with root's resolv.conf (every failed
// step is printed and the next one tried), each step marked in steps, then
// prints when it was done by kernel uptime.
func systemInit(mounts bool, root string, steps *stepTimes) {
	if mounts {
		for _, f := range sysinit.Mounts() {
			console.Line(InitName + ": " + f)
		}
		steps.mark("mounts")
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		console.Line(InitName + ": " + err.Error())
	}
	for _, f := range sysinit.Network(string(cmdline), root) {
		console.Line(InitName + ": " + f)
	}
	steps.mark("network")
	console.Line(fmt.Sprintf("%s: system up (mounts %v, network) at %ss", InitName, mounts, uptime()))
}

func main() {
	started := time.Now()
	testSocket := os.Getenv(testSocketEnv)
	if testSocket != "" && os.Getpid() == 1 {
		usage("beachball-guest: " + testSocketEnv + " (test mode) is refused as PID 1")
	}
	// As the system's init, the arguments are the kernel's leftovers (words it did not know, what followed
	// `--`): printed, never a usage error, since PID 1 exiting panics the kernel.
	asInit := filepath.Base(os.Args[0]) == InitName && os.Getpid() == 1 && testSocket == ""
	var root string
	var configureNetwork bool
	if asInit {
		if len(os.Args) > 1 {
			console.Line(fmt.Sprintf("%s: ignoring init arguments %q", InitName, os.Args[1:]))
		}
	} else {
		root, configureNetwork = parseArgs(os.Args[1:])
	}
	if configureNetwork && os.Getpid() != 1 {
		usage("beachball-guest: --configure-network is for PID 1 only")
	}
	steps := newStepTimes(started)
	if asInit || configureNetwork {
		systemInit(asInit, filepath.Join("/", root), steps)
	}
	cmdline := "/proc/cmdline"
	if testSocket != "" {
		console.UseStderr()
		if f := os.Getenv(testCmdlineEnv); f != "" {
			cmdline = f
		}
	}
	id, err := identity.Read(cmdline)
	if err != nil {
		fatal(err)
	}
	var stream channel.Stream
	if testSocket != "" {
		stream, err = channel.DialTestSocket(testSocket)
	} else {
		var path string
		if path, err = channel.FindControlPort(PortWait); err == nil {
			stream, err = channel.OpenPort(path)
		}
	}
	if err != nil {
		fatal(err)
	}
	steps.mark("port")
	if root != "" {
		if err := enterRoot(root); err != nil {
			fatal(err)
		}
	}
	plan, err := workload.PlanFor("/", os.Getenv)
	if err != nil {
		fatal(err)
	}
	w := channel.NewWriter(stream)
	send := func(m interface{}) <-chan error {
		line, err := wire.Encode(m)
		if err != nil {
			done := make(chan error, 1)
			done <- err
			return done
		}
		return w.Send(line)
	}
	reaper := pid1.NewReaper()
	var sink keys.Sink = &keys.Store{}
	effects := restore.Effects{System: restore.Kernel{}}
	if testSocket != "" {
		effects.System = &restore.Recorder{}
	} else {
		// The network the boot configured (by this guest or the init scripts, from the same keys), which a
		// restore from another placement's snapshot moves onto its own; never in test mode (the host's network).
		line, _ := os.ReadFile(cmdline)
		bootNet, _ := netconf.FromCmdline(string(line))
		effects.Net = netconf.NewLive(bootNet)
	}
	steps.mark("identity and plan")
	if testSocket == "" || os.Getenv(testControlEnv) != "" {
		runDirs := ControlRunDirs
		if testSocket != "" {
			runDirs = []string{filepath.Join(os.TempDir(), fmt.Sprintf("beachball-control-%d", os.Getpid()))}
		}
		if srv, err := newControl(id, reaper, runDirs, testSocket != ""); err != nil {
			console.Line("beachball-guest: control service not started: " + err.Error())
		} else {
			sink = srv
			effects.Control = srv
			serveControl(srv, controlAddr())
		}
	}
	steps.mark("control service")
	s := &boot.Session{
		Identity: id, BootID: newBootID(), Plan: plan, Send: send, Keys: sink,
		Reaper: reaper, BootstrapDir: workload.BootstrapDir, PowerOff: pid1.PowerOff, Restore: effects,
	}
	if testSocket != "" {
		s.PowerOff = func() error { os.Exit(0); return nil }
	}
	if os.Getpid() == 1 {
		pid1.Forward(s.RunningPID)
	}
	// Waited for before the read loop starts, so no bootstrap can arrive (and no workload write to the
	// console) before these lines: the console between the JOB markers is the workload's alone.
	if err := <-send(s.Ready()); err != nil {
		console.Line("beachball-guest: send failed: " + err.Error())
	} else {
		// Kernel uptime, so a reader can subtract the init's "starting beachball-guest at" line (exec → written);
		// /proc/self/stat's start time would be PID 1's, since the init scripts exec the guest.
		steps.mark("guest_ready")
		console.Line(fmt.Sprintf("beachball-guest: guest_ready written at %ss, %d ms after main; VmRSS %s; ms per step: %s",
			uptime(), time.Since(started).Milliseconds(), vmRSS(), steps))
	}
	console.Line(fmt.Sprintf("beachball-guest: ready (%s workload) at %ss", plan.Kind, uptime()))
	splitter := wire.NewLineSplitter(wire.MaxLineBytes)
	err = channel.ReadLoop(stream, testSocket == "", func(chunk []byte) { splitter.Push(chunk, s.Handle) })
	fatal(fmt.Errorf("control channel closed: %v", err))
}

func newBootID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		fatal(err)
	}
	return hex.EncodeToString(b)
}

// Package boot is the guest's side of one boot's conversation with the
// host (spec "Guest handshake" and the in-memory bootstrap hand-off of "One
// allocation end to end"): it answers identify and ping, accepts the one
// payload of the boot and runs it the way the image asks (package
// workload), takes control_config keys, adopts the identity a restored
// message brings (restored.go, package restore), and powers off on shutdown.
// Must never: run more than one payload per boot (a restore with payloadAllowed
// is a new boot to the host, restored.go), run a payload before its
// bootstrap_consumed receipt is written, or write payload bytes to the console.
package boot

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"sync"
	"syscall"
	"time"

	"beachball/guest/internal/console"
	"beachball/guest/internal/keys"
	"beachball/guest/internal/pid1"
	"beachball/guest/internal/restore"
	"beachball/guest/internal/wire"
	"beachball/guest/internal/workload"
)

// Version is the guest version reported in guest_ready (the manifest's guestBootstrapVersion, src/image/devBuild.ts; the wire is unchanged since the Bun guest).
const Version = "0.1.0"

// ShutdownGrace is how long a running workload has to exit after SIGTERM when the host asks for shutdown.
const ShutdownGrace = 2 * time.Second

// alreadyConsumed is the reason a second payload of one boot is refused.
const alreadyConsumed = "a payload was already consumed in this boot"

// Sender queues one message for the host and returns a channel that gets the write's result.
type Sender func(msg interface{}) <-chan error

// Session is the state of one boot: identity, the plan, the one delivery and its workload.
type Session struct {
	Identity wire.Identity
	BootID   string
	Plan     workload.Plan
	Send     Sender
	Keys     keys.Sink
	Reaper   *pid1.Reaper
	// BootstrapDir is where a stored payload goes (workload.BootstrapDir in a VM).
	BootstrapDir string
	// PowerOff ends the boot after shutting_down is written (pid1.PowerOff in a VM; test mode exits).
	PowerOff func() error
	// Restore is what a restored message acts on (restored.go); its zero value refuses them.
	Restore restore.Effects

	mu           sync.Mutex
	delivered    *wire.BootstrapConsumed
	running      *workload.Running
	reported     chan struct{}
	shuttingDown bool
}

// Ready is this boot's guest_ready message.
func (s *Session) Ready() wire.GuestReady {
	s.mu.Lock()
	defer s.mu.Unlock()
	return wire.NewGuestReady(s.Identity, s.BootID, Version)
}

// RunningPID is the running workload's PID, 0 when none (for signal forwarding).
func (s *Session) RunningPID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		return 0
	}
	return s.running.PID
}

// Handle acts on one NDJSON line from the host; lines that are not a known
// message of the right shape are ignored (ready_ack needs nothing).
func (s *Session) Handle(line []byte) {
	m, ok := wire.DecodeHost(line)
	if !ok {
		return
	}
	switch m.Type {
	case "ping":
		if m.ID != nil {
			s.Send(wire.Pong{Type: "pong", ID: *m.ID})
		}
	case "identify":
		s.Send(s.Ready())
	case "bootstrap":
		if m.DeliveryID != nil && m.ContentType != nil && m.DataBase64 != nil {
			s.bootstrap(*m.DeliveryID, *m.ContentType, *m.DataBase64)
		}
	case "control_config":
		k, err := keys.Parse(m.VerificationKeys)
		s.mu.Lock()
		// After a payload is consumed the console between the JOB markers is the workload's: an agent
		// adopting the VM sends control_config again then, and that must not write among its output.
		quiet := s.delivered != nil
		s.mu.Unlock()
		if err != nil {
			if !quiet {
				console.Line("beachball-guest: control_config ignored: " + err.Error())
			}
			return
		}
		s.Keys.SetKeys(k)
		if !quiet {
			console.Line(fmt.Sprintf("beachball-guest: control_config: %d verification keys", len(k)))
		}
	case "shutdown":
		go s.shutdown()
	case "restored":
		s.restored(m)
	case "clock":
		s.clock(m)
	}
}

func (s *Session) reject(deliveryID, reason string) {
	s.Send(wire.BootstrapRejected{Type: "bootstrap_rejected", DeliveryID: deliveryID, Reason: reason})
}

func decodeBase64(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return base64.RawStdEncoding.DecodeString(s)
	}
	return b, nil
}

func (s *Session) bootstrap(deliveryID, contentType, dataBase64 string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.delivered; d != nil {
		if d.DeliveryID == deliveryID {
			s.Send(*d)
		} else {
			s.reject(deliveryID, alreadyConsumed)
		}
		return
	}
	if s.priorWorkloadRunning() { // only after a restore with payloadAllowed (restored.go)
		s.reject(deliveryID, priorWorkloadRuns)
		return
	}
	if reason := s.Plan.Refuses(contentType); reason != "" {
		s.reject(deliveryID, reason)
		return
	}
	payload, err := decodeBase64(dataBase64)
	if err != nil {
		s.reject(deliveryID, "dataBase64 is not base64")
		return
	}
	sum := sha256.Sum256(payload)
	d := wire.BootstrapConsumed{Type: "bootstrap_consumed", DeliveryID: deliveryID, Digest: "sha256:" + hex.EncodeToString(sum[:])}
	s.delivered = &d
	s.reported = make(chan struct{})
	written := s.Send(d)
	go func() {
		// The receipt leaves the guest before the payload runs: a payload that crashes the VM was still consumed.
		if err := <-written; err != nil {
			console.Line("beachball-guest: send failed: " + err.Error())
		}
		s.run(deliveryID, payload, contentType)
	}()
}

func (s *Session) run(deliveryID string, payload []byte, contentType string) {
	s.mu.Lock()
	reported := s.reported
	if s.shuttingDown {
		s.mu.Unlock()
		close(reported)
		return
	}
	w, err := workload.Start(s.Plan, payload, contentType, s.BootstrapDir, s.Reaper)
	if err != nil {
		s.mu.Unlock()
		console.Line("beachball-guest: payload failed to start: " + err.Error())
		s.Send(wire.WorkloadExited{Type: "workload_exited", DeliveryID: deliveryID, ExitCode: 127})
		close(reported)
		return
	}
	s.running = w
	s.mu.Unlock()
	s.Send(wire.WorkloadStarted{Type: "workload_started", DeliveryID: deliveryID})
	code := <-w.Exited
	s.mu.Lock()
	s.running = nil
	s.mu.Unlock()
	s.Send(wire.WorkloadExited{Type: "workload_exited", DeliveryID: deliveryID, ExitCode: code})
	close(reported)
}

// shutdown stops the workload (SIGTERM, ShutdownGrace, SIGKILL), writes
// shutting_down and powers off. A shutdown already under way makes a second one a no-op.
func (s *Session) shutdown() {
	s.mu.Lock()
	if s.shuttingDown {
		s.mu.Unlock()
		return
	}
	s.shuttingDown = true
	w, reported := s.running, s.reported
	s.mu.Unlock()
	if w != nil {
		w.Signal(syscall.SIGTERM)
		select {
		case <-reported:
		case <-time.After(ShutdownGrace):
			w.Signal(syscall.SIGKILL)
		}
	}
	if err := <-s.Send(wire.ShuttingDown{Type: "shutting_down"}); err != nil {
		console.Line("beachball-guest: send failed: " + err.Error())
	}
	if err := s.PowerOff(); err != nil {
		console.Line("beachball-guest: reboot(2) failed: " + err.Error())
		s.mu.Lock()
		s.shuttingDown = false
		s.mu.Unlock()
	}
}

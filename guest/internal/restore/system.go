package restore

import (
	"fmt"
	"sync"
	"time"
)

// System is the seam for a restore's effects on the kernel: Kernel in a VM,
// Recorder in test mode and unit tests (which must never touch the host's
// entropy pool or clock).
type System interface {
	// AddEntropy mixes seed into the kernel's pool and says how, for the console; an error when nothing took it.
	AddEntropy(seed []byte) (how string, err error)
	// StepClock sets CLOCK_REALTIME to t.
	StepClock(t time.Time) error
}

// IdentitySink takes the adopted identity: the control service (guest/control *Server)
// checks every later grant against it. The pair changes at once, never one without the other.
type IdentitySink interface {
	SetIdentity(allocationID string, generation int64)
}

// Effects are what a restore acts on outside the boot session.
type Effects struct {
	// System adds the entropy and steps the clock; nil refuses every restored message.
	System System
	// Net applies the new placement's network; nil: network fields are reported on the console and ignored.
	Net NetConfigurer
	// Control takes the new identity; nil when no control service runs.
	Control IdentitySink
}

// Recorder is the test-mode System: it records each call and touches nothing. Safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	seeds   [][]byte
	clocks  []time.Time
	refuseE error
}

// AddEntropy records seed (a copy).
func (r *Recorder) AddEntropy(seed []byte) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuseE != nil {
		return "", r.refuseE
	}
	r.seeds = append(r.seeds, append([]byte(nil), seed...))
	return fmt.Sprintf("%d bytes recorded (test mode: the kernel's pool is not touched)", len(seed)), nil
}

// StepClock records t.
func (r *Recorder) StepClock(t time.Time) error {
	r.mu.Lock()
	r.clocks = append(r.clocks, t)
	r.mu.Unlock()
	return nil
}

// RefuseEntropy makes every later AddEntropy fail with err (nil: accept again), for tests.
func (r *Recorder) RefuseEntropy(err error) {
	r.mu.Lock()
	r.refuseE = err
	r.mu.Unlock()
}

// Calls returns copies of the recorded seeds and clock steps, in order.
func (r *Recorder) Calls() (seeds [][]byte, clocks []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.seeds...), append([]time.Time(nil), r.clocks...)
}

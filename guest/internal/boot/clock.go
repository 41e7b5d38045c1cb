package boot

import (
	"fmt"
	"time"

	"beachball/guest/internal/console"
	"beachball/guest/internal/restore"
	"beachball/guest/internal/wire"
)

// ClockStep is how far the guest's wall clock may be from a clock message before it is stepped
// (GUEST_CLOCK_STEP_MS in src/protocol/guest.ts).
const ClockStep = time.Second

// clock handles the host's periodic clock message (src/protocol/guest.ts ClockMessage): a wall
// clock outside the restore bounds is ignored; one more than ClockStep from this guest's is
// stepped to through the restore seam (the kernel in a VM, the recorder in test mode). No answer.
// The console line of a step is left out while a workload runs (its JOB markers' span is its own).
func (s *Session) clock(m wire.HostMessage) {
	if m.WallClockMs == nil || *m.WallClockMs < restore.MinWallClockMs || *m.WallClockMs > restore.MaxWallClockMs {
		return
	}
	sys := s.Restore.System
	if sys == nil {
		return
	}
	to := time.UnixMilli(*m.WallClockMs)
	off := to.Sub(time.Now())
	if off < ClockStep && off > -ClockStep {
		return
	}
	s.mu.Lock()
	quiet := s.priorWorkloadRunning()
	s.mu.Unlock()
	err := sys.StepClock(to)
	if quiet {
		return
	}
	if err != nil {
		console.Line("beachball-guest: clock not stepped: " + err.Error())
		return
	}
	console.Line(fmt.Sprintf("beachball-guest: clock stepped by %s to the host's", off.Round(time.Millisecond)))
}

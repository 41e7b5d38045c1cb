package boot

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"beachball/guest/internal/console"
	"beachball/guest/internal/restore"
	"beachball/guest/internal/wire"
)

// priorWorkloadRuns is the reason a payload is refused after a restore with payloadAllowed
// while the workload of the payload consumed before the restore still runs (one workload at a time).
const priorWorkloadRuns = "the workload of the payload consumed before the restore still runs"

// restored handles the restored message (src/protocol/guestRestored.ts) in the read loop, before
// any later line: checks it, adds its entropy (a message whose entropy no kernel interface took
// is refused: the guest would share its random numbers with every other restore of the snapshot),
// steps the clock, applies the network, hands the identity to the control service and then to
// this session, and answers with guest_ready under a new boot ID (drawn after the reseed). A
// repeat (the identity and nonce the guest already has) only gets guest_ready again; a lower
// generation of the same allocation is ignored. With payloadAllowed, a payload consumed before
// the restore no longer refuses a new one.
func (s *Session) restored(m wire.HostMessage) {
	// While a workload runs the console between its JOB markers is its own (as for control_config): a VM
	// resumed mid-workload writes none of these lines there.
	s.mu.Lock()
	cur, quiet := s.Identity, s.priorWorkloadRunning()
	s.mu.Unlock()
	say := func(line string) {
		if !quiet {
			console.Line(line)
		}
	}
	r, err := restore.Parse(m)
	if err != nil {
		say("beachball-guest: restored ignored: " + err.Error())
		return
	}
	if r.Identity == cur {
		s.Send(s.Ready())
		return
	}
	if r.Identity.AllocationID == cur.AllocationID && r.Identity.Generation < cur.Generation {
		say(fmt.Sprintf("beachball-guest: restored ignored: generation %d is older than this guest's %d",
			r.Identity.Generation, cur.Generation))
		return
	}
	fx := s.Restore
	if fx.System == nil {
		say("beachball-guest: restored refused: this guest has no way to re-seed its entropy")
		return
	}
	how, err := fx.System.AddEntropy(r.Entropy)
	if err != nil {
		say("beachball-guest: restored refused: the kernel's entropy was not re-seeded: " + err.Error())
		return
	}
	say("beachball-guest: restored: entropy: " + how)
	was, to := time.Now(), time.UnixMilli(r.WallClockMs)
	if err := fx.System.StepClock(to); err != nil {
		say("beachball-guest: restored: clock not stepped: " + err.Error())
	} else {
		say(fmt.Sprintf("beachball-guest: restored: clock stepped to %s (by %s)",
			to.UTC().Format(time.RFC3339Nano), to.Sub(was).Round(time.Millisecond)))
	}
	if r.Network != nil {
		if fx.Net == nil {
			say("beachball-guest: restored: network fields ignored: no network configurer in this guest")
		} else if err := fx.Net.Apply(*r.Network); err != nil {
			say("beachball-guest: restored: network not configured: " + err.Error())
		}
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		say("beachball-guest: restored refused: no boot ID: " + err.Error())
		return
	}
	if fx.Control != nil {
		fx.Control.SetIdentity(r.Identity.AllocationID, int64(r.Identity.Generation))
	}
	s.mu.Lock()
	s.Identity, s.BootID = r.Identity, hex.EncodeToString(b)
	if r.PayloadAllowed {
		s.delivered = nil
	}
	ready := wire.NewGuestReady(s.Identity, s.BootID, Version)
	s.mu.Unlock()
	say(fmt.Sprintf("beachball-guest: restored as %s generation %d (placement %s)",
		r.Identity.AllocationID, r.Identity.Generation, r.Identity.PlacementID))
	s.Send(ready)
}

// priorWorkloadRunning is true while the workload of a payload consumed before a restore still
// runs (or has not reported its exit). Call with s.mu held.
func (s *Session) priorWorkloadRunning() bool {
	if s.reported == nil {
		return false
	}
	select {
	case <-s.reported:
		return false
	default:
		return true
	}
}

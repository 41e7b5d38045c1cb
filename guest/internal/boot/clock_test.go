package boot

import (
	"testing"
	"time"

	"beachball/guest/internal/keys"
	"beachball/guest/internal/restore"
)

func clockLine(ms int64) []byte {
	return line(map[string]interface{}{"type": "clock", "wallClockMs": ms})
}

// A guest clock that fell behind the host's by more than ClockStep is stepped; one within it is left alone,
// and a wall clock outside the bounds or of the wrong type is ignored. No answer either way.
func TestTheClockMessageStepsOnlyAClockOffByMoreThanTheStep(t *testing.T) {
	rec := newRecorder()
	s, sys, _ := restoredSession(t, rec)
	now := time.Now()
	s.Handle(clockLine(now.Add(200 * time.Millisecond).UnixMilli()))
	s.Handle(clockLine(now.Add(-400 * time.Millisecond).UnixMilli()))
	s.Handle(clockLine(restore.MinWallClockMs - 1))
	s.Handle(line(map[string]interface{}{"type": "clock", "wallClockMs": "soon"}))
	s.Handle(line(map[string]interface{}{"type": "clock"}))
	if _, clocks := sys.Calls(); len(clocks) != 0 {
		t.Fatalf("stepped for a clock within %s or out of bounds: %v", ClockStep, clocks)
	}
	ahead := now.Add(45 * time.Second).UnixMilli()
	s.Handle(clockLine(ahead))
	_, clocks := sys.Calls()
	if len(clocks) != 1 || clocks[0].UnixMilli() != ahead {
		t.Fatalf("clock steps %v, want one to %d", clocks, ahead)
	}
	if n := len(rec.types()); n != 0 {
		t.Fatalf("the guest answered a clock message: %v", rec.types())
	}
}

// A guest without the seam (test mode's zero Effects) ignores the message rather than failing.
func TestTheClockMessageWithoutASystemIsIgnored(t *testing.T) {
	rec := newRecorder()
	s := newSession(t, rec, &keys.Store{})
	s.Handle(clockLine(time.Now().Add(time.Hour).UnixMilli()))
	if n := len(rec.types()); n != 0 {
		t.Fatalf("answered: %v", rec.types())
	}
}

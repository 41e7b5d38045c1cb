package boot

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"beachball/guest/internal/keys"
	"beachball/guest/internal/restore"
)

// identitySink records SetIdentity calls (the control service in the guest).
type identitySink struct{ calls []string }

func (i *identitySink) SetIdentity(a string, g int64) {
	i.calls = append(i.calls, fmt.Sprintf("%s/%d", a, g))
}

const newAlloc = "alloc_" + "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

func restoredLine(alloc string, gen int, nonce string, extra map[string]interface{}) []byte {
	m := map[string]interface{}{"type": "restored", "allocationId": alloc, "placementId": "p2", "generation": gen,
		"nonce": nonce, "entropyBase64": base64.StdEncoding.EncodeToString([]byte(strings.Repeat("e", 32))),
		"wallClockMs": 1_800_000_000_123}
	for k, v := range extra {
		m[k] = v
	}
	return line(m)
}

func restoredSession(t *testing.T, rec *recorder) (*Session, *restore.Recorder, *identitySink) {
	s := newSession(t, rec, &keys.Store{})
	sys, ids := &restore.Recorder{}, &identitySink{}
	s.Restore = restore.Effects{System: sys, Control: ids}
	return s, sys, ids
}

func (r *recorder) count(typ string) int {
	n := 0
	for _, ty := range r.types() {
		if ty == typ {
			n++
		}
	}
	return n
}

func TestRestoredAddsEntropyStepsTheClockAdoptsTheIdentityAndAnswersWithANewBoot(t *testing.T) {
	rec := newRecorder()
	s, sys, ids := restoredSession(t, rec)
	nonce := strings.Repeat("0f", 32)
	s.Handle(restoredLine(newAlloc, 3, nonce, nil))
	r := rec.waitFor(t, "guest_ready")
	if r["allocationId"] != newAlloc || r["placementId"] != "p2" || r["generation"].(float64) != 3 || r["nonce"] != nonce ||
		r["bootId"] == "b" || len(r["bootId"].(string)) != 32 {
		t.Fatalf("guest_ready %v", r)
	}
	seeds, clocks := sys.Calls()
	if len(seeds) != 1 || string(seeds[0]) != strings.Repeat("e", 32) || len(clocks) != 1 || !clocks[0].Equal(time.UnixMilli(1_800_000_000_123)) {
		t.Fatalf("seeds %q clocks %v", seeds, clocks)
	}
	if len(ids.calls) != 1 || ids.calls[0] != newAlloc+"/3" {
		t.Fatalf("control identity %v", ids.calls)
	}
	// identify now answers with the new identity and boot; a repeat of the message changes nothing.
	s.Handle([]byte(`{"type":"identify"}`))
	s.Handle(restoredLine(newAlloc, 3, nonce, nil))
	if rec.count("guest_ready") != 3 {
		t.Fatalf("%v", rec.types())
	}
	for _, m := range rec.msgs {
		if m["bootId"] != r["bootId"] || m["nonce"] != nonce {
			t.Fatalf("not the restored boot: %v", m)
		}
	}
	if seeds, _ := sys.Calls(); len(seeds) != 1 || len(ids.calls) != 1 {
		t.Fatalf("a repeat re-seeded or re-adopted: %d seeds, %v", len(seeds), ids.calls)
	}
}

// Bad restored messages (out-of-bound fields, an older generation of the same allocation, entropy
// no kernel interface took, a session without a System) change nothing and answer nothing.
func TestBadRestoredMessagesAreIgnored(t *testing.T) {
	rec := newRecorder()
	s, sys, ids := restoredSession(t, rec)
	nonce := strings.Repeat("0f", 32)
	short := map[string]interface{}{"entropyBase64": base64.StdEncoding.EncodeToString(make([]byte, 31))}
	s.Handle(restoredLine(newAlloc, 3, nonce, short))
	s.Handle(restoredLine(newAlloc, -1, nonce, nil))
	s.Handle(restoredLine(newAlloc, 3, "xyz", nil))
	s.Handle(restoredLine(strings.Repeat("a", 161), 3, nonce, nil))
	s.Handle(restoredLine("a", 1, nonce, nil)) // the session is allocation "a" generation 2
	s.Handle([]byte(`{"type":"restored","generation":"3"}`))
	sys.RefuseEntropy(errRefused{})
	s.Handle(restoredLine(newAlloc, 3, nonce, nil))
	s.Restore.System = nil
	s.Handle(restoredLine(newAlloc, 3, nonce, nil))
	s.Handle([]byte(`{"type":"identify"}`))
	if r := rec.waitFor(t, "guest_ready"); r["allocationId"] != "a" || r["bootId"] != "b" || rec.count("guest_ready") != 1 {
		t.Fatalf("%v", rec.msgs)
	}
	if len(ids.calls) != 0 {
		t.Fatalf("control identity changed: %v", ids.calls)
	}
	// A higher generation of the same allocation is the resume case: accepted.
	s.Restore.System = &restore.Recorder{}
	s.Handle(restoredLine("a", 3, nonce, nil))
	if rec.count("guest_ready") != 2 || ids.calls[0] != "a/3" {
		t.Fatalf("%v %v", rec.types(), ids.calls)
	}
}

type errRefused struct{}

func (errRefused) Error() string { return "refused" }

// The one-payload rule across a restore: a payload consumed before it refuses another unless
// payloadAllowed; with it, one new payload is accepted (once the old workload exited).
func TestAPayloadConsumedBeforeARestoreRefusesANewOneUnlessPayloadAllowed(t *testing.T) {
	rec := newRecorder()
	s, _, _ := restoredSession(t, rec)
	s.Handle(bootstrapLine("d1", "exit 0"))
	rec.waitFor(t, "workload_exited")
	s.Handle(restoredLine(newAlloc, 3, strings.Repeat("01", 32), nil))
	s.Handle(bootstrapLine("d2", "exit 0"))
	if rej := rec.waitFor(t, "bootstrap_rejected"); rej["deliveryId"] != "d2" || rej["reason"] != alreadyConsumed {
		t.Fatalf("%v", rej)
	}
	s.Handle(restoredLine(newAlloc, 4, strings.Repeat("02", 32), map[string]interface{}{"payloadAllowed": true}))
	s.Handle(bootstrapLine("d3", "exit 5"))
	for i := 0; rec.count("workload_exited") < 2; i++ {
		if i == 1000 {
			t.Fatalf("no second workload_exited: %v", rec.types())
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := "bootstrap_consumed workload_started workload_exited guest_ready bootstrap_rejected guest_ready bootstrap_consumed workload_started workload_exited"
	if got := strings.Join(rec.types(), " "); got != want {
		t.Fatalf("order %s", got)
	}
}

func TestAGuestThatNeverConsumedAPayloadAcceptsOneAfterARestore(t *testing.T) {
	rec := newRecorder()
	s, _, _ := restoredSession(t, rec)
	s.Handle(restoredLine(newAlloc, 3, strings.Repeat("01", 32), nil))
	s.Handle(bootstrapLine("d1", "exit 4"))
	if got := rec.waitFor(t, "workload_exited"); got["exitCode"].(float64) != 4 {
		t.Fatalf("%v", got)
	}
}

// payloadAllowed does not let a second workload run beside the first.
func TestPayloadAllowedWhileThePriorWorkloadRunsIsRefused(t *testing.T) {
	rec := newRecorder()
	s, _, _ := restoredSession(t, rec)
	s.Handle(bootstrapLine("d1", "sleep 30"))
	rec.waitFor(t, "workload_started")
	s.Handle(restoredLine(newAlloc, 3, strings.Repeat("01", 32), map[string]interface{}{"payloadAllowed": true}))
	s.Handle(bootstrapLine("d2", "exit 0"))
	if rej := rec.waitFor(t, "bootstrap_rejected"); rej["reason"] != priorWorkloadRuns {
		t.Fatalf("%v", rej)
	}
	s.Handle([]byte(`{"type":"shutdown"}`))
	rec.waitFor(t, "powered_off")
}

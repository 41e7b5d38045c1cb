package boot

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"beachball/guest/internal/keys"
	"beachball/guest/internal/pid1"
	"beachball/guest/internal/wire"
	"beachball/guest/internal/workload"
)

type recorder struct {
	mu   sync.Mutex
	msgs []map[string]interface{}
	cond *sync.Cond
}

func newRecorder() *recorder {
	r := &recorder{}
	r.cond = sync.NewCond(&r.mu)
	return r
}

func (r *recorder) send(m interface{}) <-chan error {
	b, _ := json.Marshal(m)
	var v map[string]interface{}
	json.Unmarshal(b, &v)
	r.mu.Lock()
	r.msgs = append(r.msgs, v)
	r.cond.Broadcast()
	r.mu.Unlock()
	done := make(chan error, 1)
	done <- nil
	return done
}

// waitFor returns the first message of type typ after index from, waiting up to 10 s.
func (r *recorder) waitFor(t *testing.T, typ string) map[string]interface{} {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		for _, m := range r.msgs {
			if m["type"] == typ {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s in %v", typ, r.msgs)
		}
		r.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		r.mu.Lock()
	}
}

func (r *recorder) types() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.msgs {
		out = append(out, m["type"].(string))
	}
	return out
}

var reaper = pid1.NewReaper()

func newSession(t *testing.T, rec *recorder, store *keys.Store) *Session {
	plan, err := workload.PlanFor(t.TempDir(), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return &Session{
		Identity: wire.Identity{AllocationID: "a", PlacementID: "p", Generation: 2, Nonce: "n"},
		BootID:   "b", Plan: plan, Send: rec.send, Keys: store, Reaper: reaper,
		BootstrapDir: t.TempDir(), PowerOff: func() error { rec.send(map[string]string{"type": "powered_off"}); return nil },
	}
}

func line(m map[string]interface{}) []byte { b, _ := json.Marshal(m); return b }

func bootstrapLine(id, script string) []byte {
	return line(map[string]interface{}{"type": "bootstrap", "deliveryId": id, "contentType": "text/x-shellscript",
		"dataBase64": base64.StdEncoding.EncodeToString([]byte(script))})
}

func TestOneBootstrapPerBootDuplicateReackedOtherRefused(t *testing.T) {
	rec := newRecorder()
	s := newSession(t, rec, &keys.Store{})
	s.Handle(bootstrapLine("d1", "exit 3"))
	if got := rec.waitFor(t, "workload_exited"); got["exitCode"].(float64) != 3 {
		t.Fatalf("exit %v", got)
	}
	s.Handle(bootstrapLine("d1", "exit 3"))
	s.Handle(bootstrapLine("d2", "exit 0"))
	rej := rec.waitFor(t, "bootstrap_rejected")
	if rej["deliveryId"] != "d2" || rej["reason"] != alreadyConsumed {
		t.Fatalf("rejected %v", rej)
	}
	want := "bootstrap_consumed workload_started workload_exited bootstrap_consumed bootstrap_rejected"
	if strings.Join(rec.types(), " ") != want {
		t.Fatalf("order %v", rec.types())
	}
}

func TestShellPlanRefusesOtherContentTypesWithoutConsuming(t *testing.T) {
	rec := newRecorder()
	s := newSession(t, rec, &keys.Store{})
	s.Handle(line(map[string]interface{}{"type": "bootstrap", "deliveryId": "d1", "contentType": "application/json", "dataBase64": ""}))
	if rej := rec.waitFor(t, "bootstrap_rejected"); !strings.Contains(rej["reason"].(string), "unsupported content type") {
		t.Fatalf("%v", rej)
	}
	s.Handle(bootstrapLine("d2", "exit 0"))
	rec.waitFor(t, "workload_exited")
}

func TestShutdownTermsWorkloadThenReportsThenPowersOff(t *testing.T) {
	rec := newRecorder()
	s := newSession(t, rec, &keys.Store{})
	s.Handle(bootstrapLine("d1", "sleep 30"))
	rec.waitFor(t, "workload_started")
	s.Handle([]byte(`{"type":"shutdown"}`))
	rec.waitFor(t, "powered_off")
	want := "bootstrap_consumed workload_started workload_exited shutting_down powered_off"
	if strings.Join(rec.types(), " ") != want {
		t.Fatalf("order %v", rec.types())
	}
	if code := rec.waitFor(t, "workload_exited")["exitCode"].(float64); code != 128+15 {
		t.Fatalf("exit code %v, want 143 (SIGTERM)", code)
	}
}

func TestControlConfigNewestReplacesMalformedIgnored(t *testing.T) {
	rec := newRecorder()
	store := &keys.Store{}
	s := newSession(t, rec, store)
	pub, _, _ := ed25519.GenerateKey(nil)
	k := base64.StdEncoding.EncodeToString(pub)
	s.Handle(line(map[string]interface{}{"type": "control_config", "verificationKeys": map[string]string{"k1": k, "k2": k}}))
	s.Handle(line(map[string]interface{}{"type": "control_config", "verificationKeys": map[string]string{"k3": k}}))
	s.Handle(line(map[string]interface{}{"type": "control_config", "verificationKeys": map[string]string{"bad id": k}}))
	s.Handle(line(map[string]interface{}{"type": "control_config", "verificationKeys": map[string]string{"k4": "c2hvcnQ="}}))
	if got := store.Keys(); len(got) != 1 || got["k3"] == nil {
		t.Fatalf("keys %v", got)
	}
}

func TestPingAndIdentify(t *testing.T) {
	rec := newRecorder()
	s := newSession(t, rec, &keys.Store{})
	s.Handle([]byte(`{"type":"ping","id":"x1"}`))
	s.Handle([]byte(`{"type":"ping","id":5}`))
	s.Handle([]byte(`{"type":"identify"}`))
	s.Handle([]byte(`{"type":"ready_ack"}`))
	if p := rec.waitFor(t, "pong"); p["id"] != "x1" {
		t.Fatalf("%v", p)
	}
	if r := rec.waitFor(t, "guest_ready"); r["generation"].(float64) != 2 || r["bootId"] != "b" || r["guestVersion"] != Version {
		t.Fatalf("%v", r)
	}
	if strings.Join(rec.types(), " ") != "pong guest_ready" {
		t.Fatalf("%v", rec.types())
	}
}

package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"beachball/guest/internal/boot"
	"beachball/guest/internal/pid1"
	"beachball/guest/internal/restore"
	"beachball/guest/internal/wire"
)

// grantHeader signs a grant for id (canonical JSON written out with its keys sorted,
// src/protocol/canonical.ts) and encodes it as the beachball-grant header value.
func grantHeader(priv ed25519.PrivateKey, id wire.Identity) string {
	now := time.Now().UnixMilli()
	payload := fmt.Sprintf(`{"allocationAddress":"fd00::3","allocationId":%q,"clientAddress":"fd00::2","clientPublicKey":"%s=",`+
		`"expiresAtMs":%d,"generation":%d,"grantId":"grt_%s","hostId":"h1","hostPublicKey":"%s=","issuedAtMs":%d,`+
		`"networkId":"net_%s","policyRevision":0,"ports":[%d],"tenant":"t1","transport":"tcp","v":1}`,
		id.AllocationID, strings.Repeat("A", 43), now+60000, id.Generation, strings.Repeat("a", 32), strings.Repeat("B", 43), now,
		strings.Repeat("b", 32), ControlPort)
	sig := ed25519.Sign(priv, []byte("beachball-grant-v1\n"+payload))
	doc := `{"keyId":"k1","payload":` + payload + `,"signature":"` + base64.StdEncoding.EncodeToString(sig) + `"}`
	return base64.RawURLEncoding.EncodeToString([]byte(doc))
}

// The guest's wiring: the control service answers GUEST_NOT_READY until a control_config line
// reaches the boot session, takes that message's keys, and runs an exec whose status comes
// through the PID-1 reaper (which waits for any child) with its exit code intact.
func TestTheGuestServesControlWithKeysFromControlConfigAndExecsThroughTheReaper(t *testing.T) {
	id := wire.Identity{AllocationID: "alloc_" + strings.Repeat("c", 32), Generation: 2}
	reaper := pid1.NewReaper()
	srv, err := newControl(id, reaper, []string{t.TempDir() + "/run"}, true)
	if err != nil {
		t.Fatal(err)
	}
	l, err := listenControl("127.0.0.1:0", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go srv.Serve(l)
	base := "http://" + l.Addr().String()
	pub, priv, _ := ed25519.GenerateKey(nil)
	call := func(method, path, body string, out interface{}) int {
		req, _ := http.NewRequest(method, base+path, bytes.NewBufferString(body))
		req.Header.Set("beachball-grant", grantHeader(priv, id))
		req.Header.Set("content-type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		_ = json.NewDecoder(res.Body).Decode(out)
		return res.StatusCode
	}
	var problem map[string]interface{}
	if status := call("GET", "/v1/execs", "", &problem); status != 503 || problem["code"] != "GUEST_NOT_READY" {
		t.Fatalf("before control_config: %d %v", status, problem)
	}
	s := &boot.Session{Identity: id, Keys: srv, Reaper: reaper, Send: func(interface{}) <-chan error { return nil }}
	s.Handle([]byte(`{"type":"control_config","verificationKeys":{"k1":"` + base64.StdEncoding.EncodeToString(pub) + `"}}`))
	var view struct {
		ExecID   string `json:"execId"`
		State    string `json:"state"`
		ExitCode *int   `json:"exitCode"`
	}
	if status := call("POST", "/v1/execs", `{"shell":"exit 7"}`, &view); status != 201 {
		t.Fatalf("start: %d %+v", status, view)
	}
	for i := 0; i < 1000 && view.State != "exited"; i++ {
		time.Sleep(10 * time.Millisecond)
		call("GET", "/v1/execs/"+view.ExecID, "", &view)
	}
	if view.ExitCode == nil || *view.ExitCode != 7 {
		t.Fatalf("exec %+v, want exit code 7", view)
	}
}

// The run dir is the first candidate that can be written; none at all is an error.
func TestTheControlRunDirIsTheFirstWritableCandidate(t *testing.T) {
	dir := t.TempDir()
	got, err := controlRunDir([]string{"/proc/nope", dir + "/a"})
	if err != nil || got != dir+"/a" {
		t.Fatalf("controlRunDir = %q, %v", got, err)
	}
	if _, err := controlRunDir([]string{"/proc/nope"}); err == nil {
		t.Fatal("no writable candidate: no error")
	}
}

// A restored message moves the control service to the new identity at once: a grant for the new
// generation is accepted, one for the generation before the restore is refused (GRANT_MISMATCH).
func TestARestoredGuestsControlServiceChecksGrantsAgainstTheNewIdentity(t *testing.T) {
	old := wire.Identity{AllocationID: "alloc_" + strings.Repeat("c", 32), PlacementID: "p", Generation: 2, Nonce: "n"}
	srv, err := newControl(old, pid1.NewReaper(), []string{t.TempDir() + "/run"}, true)
	if err != nil {
		t.Fatal(err)
	}
	l, err := listenControl("127.0.0.1:0", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go srv.Serve(l)
	pub, priv, _ := ed25519.GenerateKey(nil)
	srv.SetKeys(map[string]ed25519.PublicKey{"k1": pub})
	status := func(id wire.Identity) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+l.Addr().String()+"/v1/execs", nil)
		req.Header.Set("beachball-grant", grantHeader(priv, id))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var p struct {
			Extra struct {
				GrantCode string `json:"grantCode"`
			} `json:"extra"`
		}
		_ = json.NewDecoder(res.Body).Decode(&p)
		return res.StatusCode, p.Extra.GrantCode
	}
	if code, _ := status(old); code != 200 {
		t.Fatalf("before the restore: %d", code)
	}
	s := &boot.Session{Identity: old, BootID: "b", Send: func(interface{}) <-chan error { return nil },
		Restore: restore.Effects{System: &restore.Recorder{}, Control: srv}}
	next := wire.Identity{AllocationID: old.AllocationID, PlacementID: "p2", Generation: 3, Nonce: strings.Repeat("ab", 32)}
	s.Handle([]byte(fmt.Sprintf(`{"type":"restored","allocationId":%q,"placementId":"p2","generation":3,"nonce":%q,`+
		`"entropyBase64":"%s","wallClockMs":1800000000000}`, next.AllocationID, next.Nonce,
		base64.StdEncoding.EncodeToString(make([]byte, 32)))))
	if code, _ := status(next); code != 200 {
		t.Fatalf("new generation after the restore: %d", code)
	}
	if code, grantCode := status(old); code != 401 || grantCode != "GRANT_MISMATCH" {
		t.Fatalf("old generation after the restore: %d %q", code, grantCode)
	}
}

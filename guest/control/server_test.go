package control

import (
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Without LoopbackTesting the TCP peer must be the grant's clientAddress: a good grant
// presented from another address is CONTROL_UNAUTHORIZED (GRANT_MISMATCH); before SetKeys
// every request is GUEST_NOT_READY.
func TestTheServerChecksThePeerAddressAndWaitsForKeys(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	srv := New(Config{AllocationID: testGrant(time.Now())["allocationId"].(string), Generation: 2, RunDir: t.TempDir()})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	get := func() (int, map[string]interface{}) {
		req, _ := http.NewRequest("GET", hs.URL+"/v1/execs", nil)
		req.Header.Set(GrantHeader, signHeader(t, priv, testGrant(time.Now())))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body map[string]interface{}
		_ = json.NewDecoder(res.Body).Decode(&body)
		return res.StatusCode, body
	}
	if status, body := get(); status != 503 || body["code"] != "GUEST_NOT_READY" {
		t.Fatalf("before keys: %d %v", status, body)
	}
	srv.SetKeys(map[string]ed25519.PublicKey{"k1": pub})
	status, body := get()
	extra, _ := body["extra"].(map[string]interface{})
	if status != 401 || body["code"] != "CONTROL_UNAUTHORIZED" || extra["grantCode"] != "GRANT_MISMATCH" {
		t.Fatalf("from 127.0.0.1 with a grant for fd00::2: %d %v", status, body)
	}
}

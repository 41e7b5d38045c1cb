package control

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestCanonicalJSONEscapesAsJSONStringify(t *testing.T) {
	// The expected text is what canonicalJson gives in src/protocol/canonical.ts.
	got := canonicalJSON(map[string]interface{}{"b": "<&>\u2028\"\\\b\f\n\r\t\x01é😀", "a": []interface{}{int64(1), nil, true}})
	want := "{\"a\":[1,null,true],\"b\":\"<&>\u2028\\\"\\\\\\b\\f\\n\\r\\t\\u0001é😀\"}"
	if got != want {
		t.Fatalf("canonicalJSON = %q, want %q", got, want)
	}
}

func testGrant(now time.Time) map[string]interface{} {
	return map[string]interface{}{
		"v": int64(1), "grantId": "grt_" + strings.Repeat("a", 32), "tenant": "t1",
		"networkId": "net_" + strings.Repeat("b", 32), "allocationId": "alloc_" + strings.Repeat("c", 32),
		"generation": int64(2), "hostId": "h1", "clientPublicKey": strings.Repeat("A", 43) + "=",
		"hostPublicKey": strings.Repeat("B", 43) + "=", "clientAddress": "fd00::2", "allocationAddress": "fd00::3",
		"transport": "tcp", "ports": []interface{}{int64(GuestControlPort)}, "policyRevision": int64(0),
		"issuedAtMs": now.UnixMilli(), "expiresAtMs": now.Add(time.Minute).UnixMilli(),
	}
}

func signHeader(t *testing.T, priv ed25519.PrivateKey, payload map[string]interface{}) string {
	sig := ed25519.Sign(priv, signingBytes(payload))
	doc := "{\"keyId\":\"k1\",\"payload\":" + canonicalJSON(payload) + ",\"signature\":\"" + base64.StdEncoding.EncodeToString(sig) + "\"}"
	return base64.RawURLEncoding.EncodeToString([]byte(doc))
}

func TestCheckGrantAcceptsAGoodGrantAndRefusesEachKindOfBadOne(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{"k1": pub}
	now := time.Now()
	expect := GrantExpectation{AllocationID: "alloc_" + strings.Repeat("c", 32), Generation: 2, PeerAddress: "fd00::2"}
	if g, ref := checkGrant(signHeader(t, priv, testGrant(now)), keys, expect, now); ref != nil || g.Tenant != "t1" {
		t.Fatalf("good grant refused: %+v", ref)
	}
	cases := map[string]func(p map[string]interface{}){
		"generation": func(p map[string]interface{}) { p["generation"] = int64(3) },
		"transport":  func(p map[string]interface{}) { p["transport"] = "udp" },
		"port":       func(p map[string]interface{}) { p["ports"] = []interface{}{int64(22)} },
		"expired":    func(p map[string]interface{}) { p["expiresAtMs"] = now.Add(-time.Second).UnixMilli() },
		"peer":       func(p map[string]interface{}) { p["clientAddress"] = "fd00::9" },
	}
	for name, mutate := range cases {
		p := testGrant(now)
		mutate(p)
		if _, ref := checkGrant(signHeader(t, priv, p), keys, expect, now); ref == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A field changed after signing: the signature no longer covers it.
	h := signHeader(t, priv, testGrant(now))
	raw, _ := base64.RawURLEncoding.DecodeString(h)
	var doc map[string]interface{}
	_ = json.Unmarshal(raw, &doc)
	doc["payload"].(map[string]interface{})["tenant"] = "t2"
	tampered, _ := json.Marshal(doc)
	if _, ref := checkGrant(base64.RawURLEncoding.EncodeToString(tampered), keys, expect, now); ref == nil || ref.Code != "GRANT_SIGNATURE_INVALID" {
		t.Errorf("tampered: %+v", ref)
	}
	if _, ref := checkGrant("", keys, expect, now); ref == nil {
		t.Errorf("missing header accepted")
	}
}

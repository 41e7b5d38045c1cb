package control

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"regexp"
	"time"
	"unicode/utf16"
)

// Grant is the payload of a verified connection grant: the fields the
// control service acts on (GrantPayload in src/protocol/connection.ts).
type Grant struct {
	GrantID       string
	Tenant        string
	AllocationID  string
	Generation    int64
	ClientAddress string
	Transport     string
	Ports         []int64
	IssuedAtMs    int64
	ExpiresAtMs   int64
}

// GrantExpectation is what the guest knows of itself: each grant must match it.
type GrantExpectation struct {
	AllocationID string
	Generation   int64
	// PeerAddress is the TCP peer of the request; empty skips the check (loopback testing only).
	PeerAddress string
}

// grantRefusal is a refused grant: the code src/protocol/connectionSignature.ts
// would give (GRANT_SIGNATURE_INVALID, GRANT_MISMATCH, GRANT_EXPIRED,
// GRANT_NOT_YET_VALID) and a sentence. The service answers each as
// CONTROL_UNAUTHORIZED with `extra.grantCode` set to Code.
type grantRefusal struct {
	Code   string
	Reason string
}

// The patterns of src/protocol/ids.ts and connection.ts (RE2 reads them the same way as ECMAScript here).
var (
	grantIDRe     = regexp.MustCompile(`^grt_[0-9a-f]{32}$`)
	networkIDRe   = regexp.MustCompile(`^net_[0-9a-f]{32}$`)
	allocationRe  = regexp.MustCompile(`^alloc_[0-9a-f]{32}$`)
	hostIDRe      = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	b64KeyRe      = regexp.MustCompile(`^[A-Za-z0-9+/]{43}=$`)
	b64SigRe      = regexp.MustCompile(`^[A-Za-z0-9+/]{86}==$`)
	ipv6Re        = regexp.MustCompile(`^[0-9a-f:]+$`)
	keyIDRe       = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)
	payloadFields = []string{"v", "grantId", "tenant", "networkId", "allocationId", "generation", "hostId",
		"clientPublicKey", "hostPublicKey", "clientAddress", "allocationAddress", "transport", "ports",
		"policyRevision", "issuedAtMs", "expiresAtMs"}
)

// maxWireInteger is 2^53-1: the largest integer a JSON number carries exactly (Number.MAX_SAFE_INTEGER).
const maxWireInteger = 1<<53 - 1

// utf16Len is the length of s in UTF-16 code units (what TypeBox's maxLength counts).
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += len(utf16.Encode([]rune{r}))
	}
	return n
}

// exactObject decodes raw as a JSON object whose keys are exactly want
// (each present once; Go's case-insensitive field matching is not used).
func exactObject(raw []byte, want []string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	if len(m) != len(want) {
		return nil, fmt.Errorf("has %d fields, expected %v", len(m), want)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			return nil, fmt.Errorf("missing field %s", k)
		}
	}
	return m, nil
}

func jsonString(raw json.RawMessage, name string, re *regexp.Regexp, minLen, maxLen int) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("/%s must be a string", name)
	}
	if n := utf16Len(s); n < minLen || n > maxLen {
		return "", fmt.Errorf("/%s length %d is outside %d..%d", name, n, minLen, maxLen)
	}
	if re != nil && !re.MatchString(s) {
		return "", fmt.Errorf("/%s does not match %s", name, re.String())
	}
	return s, nil
}

func jsonInteger(raw json.RawMessage, name string, min int64) (int64, error) {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || f != math.Trunc(f) || f > maxWireInteger || f < -maxWireInteger {
		return 0, fmt.Errorf("/%s must be an integer", name)
	}
	if int64(f) < min {
		return 0, fmt.Errorf("/%s must be >= %d", name, min)
	}
	return int64(f), nil
}

// parseGrantPayload checks the payload's shape (GrantPayload) and returns
// the grant and the value tree its canonical JSON is made from.
func parseGrantPayload(raw []byte) (*Grant, map[string]interface{}, error) {
	m, err := exactObject(raw, payloadFields)
	if err != nil {
		return nil, nil, fmt.Errorf("/payload %v", err)
	}
	tree := map[string]interface{}{}
	g := &Grant{}
	str := func(name string, re *regexp.Regexp, minLen, maxLen int) string {
		if err != nil {
			return ""
		}
		var s string
		s, err = jsonString(m[name], name, re, minLen, maxLen)
		tree[name] = s
		return s
	}
	num := func(name string, min int64) int64 {
		if err != nil {
			return 0
		}
		var n int64
		n, err = jsonInteger(m[name], name, min)
		tree[name] = n
		return n
	}
	if v := num("v", 1); err == nil && v != 1 {
		err = fmt.Errorf("/v must be 1")
	}
	g.GrantID = str("grantId", grantIDRe, 0, 1<<20)
	g.Tenant = str("tenant", nil, 1, 64)
	str("networkId", networkIDRe, 0, 1<<20)
	g.AllocationID = str("allocationId", allocationRe, 0, 1<<20)
	g.Generation = num("generation", 1)
	str("hostId", hostIDRe, 0, 1<<20)
	str("clientPublicKey", b64KeyRe, 0, 44)
	str("hostPublicKey", b64KeyRe, 0, 44)
	g.ClientAddress = str("clientAddress", ipv6Re, 2, 45)
	str("allocationAddress", ipv6Re, 2, 45)
	g.Transport = str("transport", nil, 0, 1<<20)
	if err == nil && g.Transport != "tcp" && g.Transport != "udp" {
		err = fmt.Errorf("/transport must be tcp or udp")
	}
	num("policyRevision", 0)
	g.IssuedAtMs = num("issuedAtMs", 0)
	g.ExpiresAtMs = num("expiresAtMs", 0)
	if err != nil {
		return nil, nil, err
	}
	var ports []json.RawMessage
	if e := json.Unmarshal(m["ports"], &ports); e != nil || len(ports) < 1 || len(ports) > MaxGrantPorts {
		return nil, nil, fmt.Errorf("/ports must be an array of 1..%d ports", MaxGrantPorts)
	}
	seen := map[int64]bool{}
	list := make([]interface{}, 0, len(ports))
	for _, p := range ports {
		n, e := jsonInteger(p, "ports", 1)
		if e != nil || n > 65535 || seen[n] {
			return nil, nil, fmt.Errorf("/ports must hold unique ports 1..65535")
		}
		seen[n] = true
		g.Ports = append(g.Ports, n)
		list = append(list, n)
	}
	tree["ports"] = list
	return g, tree, nil
}

// DecodeGrantHeader parses the `beachball-grant` header value (base64url
// without padding of the signed grant's JSON) into the signed document's
// three raw fields. A refusal is GRANT_SIGNATURE_INVALID, as a malformed
// document cannot verify.
func decodeGrantHeader(header string) (payload []byte, keyID, signature string, ref *grantRefusal) {
	bad := func(format string, a ...interface{}) ([]byte, string, string, *grantRefusal) {
		return nil, "", "", &grantRefusal{"GRANT_SIGNATURE_INVALID", "not a signed grant: " + fmt.Sprintf(format, a...)}
	}
	if header == "" {
		return bad("no %s header", GrantHeader)
	}
	if len(header) > MaxGrantHeaderBytes {
		return bad("the header is longer than %d bytes", MaxGrantHeaderBytes)
	}
	doc, err := base64.RawURLEncoding.Strict().DecodeString(header)
	if err != nil {
		return bad("the header is not base64url without padding")
	}
	m, err := exactObject(doc, []string{"payload", "keyId", "signature"})
	if err != nil {
		return bad("%v", err)
	}
	if keyID, err = jsonString(m["keyId"], "keyId", keyIDRe, 1, 64); err != nil {
		return bad("%v", err)
	}
	if signature, err = jsonString(m["signature"], "signature", b64SigRe, 0, 88); err != nil {
		return bad("%v", err)
	}
	return m["payload"], keyID, signature, nil
}

// signingBytes is UTF-8 of `beachball-grant-v1\n` and the payload's
// canonical JSON (signingBytes("grant", payload) in src/protocol/connection.ts).
func signingBytes(tree map[string]interface{}) []byte {
	return []byte("beachball-grant-v1\n" + canonicalJSON(tree))
}

// checkGrant verifies a grant header exactly as checkSignedGrant does
// (src/protocol/connectionSignature.ts), in the same order: shape, trusted
// key ID and Ed25519 signature (GRANT_SIGNATURE_INVALID), lifetime within
// MaxGrantTTL and two different IPv6 addresses (GRANT_MISMATCH), freshness
// with ClockSkew (GRANT_EXPIRED, GRANT_NOT_YET_VALID), then allocationId,
// generation, transport tcp and GuestControlPort in ports, and the peer
// address equal to clientAddress unless expect.PeerAddress is empty
// (GRANT_MISMATCH).
func checkGrant(header string, keys map[string]ed25519.PublicKey, expect GrantExpectation, now time.Time) (*Grant, *grantRefusal) {
	rawPayload, keyID, sigB64, ref := decodeGrantHeader(header)
	if ref != nil {
		return nil, ref
	}
	g, tree, err := parseGrantPayload(rawPayload)
	if err != nil {
		return nil, &grantRefusal{"GRANT_SIGNATURE_INVALID", "not a signed grant: " + err.Error()}
	}
	pub, ok := keys[keyID]
	if !ok {
		return nil, &grantRefusal{"GRANT_SIGNATURE_INVALID", fmt.Sprintf("grant signed with key %q, which is not a configured verification key", keyID)}
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(sigB64)
	if err != nil || len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, signingBytes(tree), sig) {
		return nil, &grantRefusal{"GRANT_SIGNATURE_INVALID", fmt.Sprintf("grant %s: the signature does not verify with key %q", g.GrantID, keyID)}
	}
	mismatch := func(format string, a ...interface{}) (*Grant, *grantRefusal) {
		return nil, &grantRefusal{"GRANT_MISMATCH", fmt.Sprintf("grant %s: ", g.GrantID) + fmt.Sprintf(format, a...)}
	}
	if life := g.ExpiresAtMs - g.IssuedAtMs; life <= 0 || life > MaxGrantTTL.Milliseconds() {
		return mismatch("lifetime %d ms is outside 1..%d ms", life, MaxGrantTTL.Milliseconds())
	}
	client, alloc := net.ParseIP(tree["clientAddress"].(string)), net.ParseIP(tree["allocationAddress"].(string))
	if client == nil || alloc == nil || tree["clientAddress"] == tree["allocationAddress"] {
		return mismatch("client and allocation addresses must be two different IPv6 addresses")
	}
	nowMs := now.UnixMilli()
	if nowMs >= g.ExpiresAtMs {
		return nil, &grantRefusal{"GRANT_EXPIRED", fmt.Sprintf("grant %s expired at %s", g.GrantID, time.UnixMilli(g.ExpiresAtMs).UTC().Format(time.RFC3339Nano))}
	}
	if nowMs < g.IssuedAtMs-ClockSkew.Milliseconds() {
		return nil, &grantRefusal{"GRANT_NOT_YET_VALID", fmt.Sprintf("grant %s is issued beyond the allowed clock skew", g.GrantID)}
	}
	if g.AllocationID != expect.AllocationID {
		return mismatch("allocationId is %q, expected %q", g.AllocationID, expect.AllocationID)
	}
	if g.Generation != expect.Generation {
		return mismatch("generation is %d, expected %d", g.Generation, expect.Generation)
	}
	if g.Transport != "tcp" {
		return mismatch("transport is %q, expected \"tcp\"", g.Transport)
	}
	hasPort := false
	for _, p := range g.Ports {
		hasPort = hasPort || p == GuestControlPort
	}
	if !hasPort {
		return mismatch("does not allow port %d", GuestControlPort)
	}
	if expect.PeerAddress != "" {
		peer := net.ParseIP(expect.PeerAddress)
		if peer == nil || !peer.Equal(client) {
			return mismatch("the connection comes from %s, not the grant's client address %s", expect.PeerAddress, g.ClientAddress)
		}
	}
	return g, nil
}

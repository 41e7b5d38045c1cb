package control

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
)

var verificationKeyIDRe = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// ParseControlConfig reads one host→guest `control_config` message
// (ControlConfigMessage in src/protocol/control.ts: `{"type":
// "control_config", "verificationKeys": {keyId: base64 raw Ed25519 public
// key}}`) into the keys SetKeys takes. An error names the bad field: an
// unknown field, a key ID outside its pattern, a key that is not standard
// base64 of 32 bytes, more than MaxVerificationKeys keys.
func ParseControlConfig(line []byte) (map[string]ed25519.PublicKey, error) {
	m, err := exactObject(line, []string{"type", "verificationKeys"})
	if err != nil {
		return nil, fmt.Errorf("control_config: %v", err)
	}
	var typ string
	if json.Unmarshal(m["type"], &typ) != nil || typ != "control_config" {
		return nil, fmt.Errorf("control_config: type must be \"control_config\"")
	}
	var raw map[string]string
	if err := json.Unmarshal(m["verificationKeys"], &raw); err != nil || raw == nil {
		return nil, fmt.Errorf("control_config: verificationKeys must be an object of strings")
	}
	if len(raw) > MaxVerificationKeys {
		return nil, fmt.Errorf("control_config: %d keys, at most %d", len(raw), MaxVerificationKeys)
	}
	keys := make(map[string]ed25519.PublicKey, len(raw))
	for id, b64 := range raw {
		if !verificationKeyIDRe.MatchString(id) {
			return nil, fmt.Errorf("control_config: key ID %q does not match %s", id, verificationKeyIDRe)
		}
		k, err := base64.StdEncoding.Strict().DecodeString(b64)
		if err != nil || len(k) != ed25519.PublicKeySize || base64.StdEncoding.EncodeToString(k) != b64 {
			return nil, fmt.Errorf("control_config: key %q is not standard base64 of a 32-byte Ed25519 public key", id)
		}
		keys[id] = ed25519.PublicKey(k)
	}
	return keys, nil
}

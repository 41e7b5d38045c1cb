// Package keys holds the connection verification keys the host sends in
// `control_config` (src/protocol/control.ts ControlConfigMessage) and hands
// them to whoever checks grants (the control service, guest/control, wired
// in by the lead). The newest message replaces the keys before it.
// Must never: accept more than MaxVerificationKeys keys or a key that is not
// a raw 32-byte Ed25519 public key.
package keys

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"regexp"
	"sync"
)

// MaxVerificationKeys is the most keys one control_config may carry (src/protocol/control.ts MAX_CONTROL_VERIFICATION_KEYS).
const MaxVerificationKeys = 8

// MaxKeyIDBytes is the longest key ID, bytes (the schema's maxLength).
const MaxKeyIDBytes = 64

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

// Sink receives each accepted set of verification keys (key ID → public key).
// The control service (guest/control *Server, its SetKeys) implements it; Store is the default.
type Sink interface {
	SetKeys(keys map[string]ed25519.PublicKey)
}

// Store is a Sink that keeps the newest keys; safe for concurrent use.
type Store struct {
	mu   sync.Mutex
	keys map[string]ed25519.PublicKey
}

// SetKeys replaces the stored keys.
func (s *Store) SetKeys(k map[string]ed25519.PublicKey) {
	s.mu.Lock()
	s.keys = k
	s.mu.Unlock()
}

// Keys returns the newest keys, nil before any control_config arrived.
func (s *Store) Keys() map[string]ed25519.PublicKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys
}

// Parse checks a control_config's verificationKeys (key ID → base64 raw
// Ed25519 public key) and decodes them. It fails on too many keys, a
// malformed key ID or a value that is not 32 bytes of standard base64.
func Parse(raw map[string]string) (map[string]ed25519.PublicKey, error) {
	if raw == nil {
		return nil, fmt.Errorf("verificationKeys is missing")
	}
	if len(raw) > MaxVerificationKeys {
		return nil, fmt.Errorf("more than %d verification keys", MaxVerificationKeys)
	}
	out := make(map[string]ed25519.PublicKey, len(raw))
	for id, v := range raw {
		if len(id) > MaxKeyIDBytes || !keyIDPattern.MatchString(id) {
			return nil, fmt.Errorf("bad key ID %q", id)
		}
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			b, err = base64.RawStdEncoding.DecodeString(v)
		}
		if err != nil || len(b) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("key %q is not a base64 32-byte Ed25519 public key", id)
		}
		out[id] = ed25519.PublicKey(b)
	}
	return out, nil
}

// Package restore is the guest's side of a restore from a snapshot (issue 21;
// src/protocol/guestRestored.ts, the one definition of the `restored`
// message): it checks the message (Parse), and does what a VM woken from
// another VM's memory needs before it can be trusted again: new entropy in
// the kernel's pool, CLOCK_REALTIME stepped to the host's clock (System,
// with Kernel in a VM and Recorder in test mode), the new placement's
// network (NetConfigurer: netconf.Live in a VM) and the new identity for
// the control service (IdentitySink). Package boot calls it and answers
// with a fresh guest_ready.
// Must never: touch the kernel or the clock in test mode, or print the nonce.
package restore

import (
	"encoding/base64"
	"fmt"

	"beachball/guest/internal/pattern"
	"beachball/guest/internal/wire"
)

// The bounds of src/protocol/guestRestored.ts (same names in SCREAMING_CASE there).
const (
	// MinEntropyBytes is the fewest bytes of entropy a restored message carries (MIN_RESTORE_ENTROPY_BYTES).
	MinEntropyBytes = 32
	// MaxEntropyBytes is the most bytes of entropy a restored message carries (MAX_RESTORE_ENTROPY_BYTES).
	MaxEntropyBytes = 512
	// MinWallClockMs is the earliest wall clock, ms since the epoch (MIN_RESTORE_WALL_CLOCK_MS, 2020-01-01).
	MinWallClockMs = 1_577_836_800_000
	// MaxWallClockMs is the latest wall clock, ms since the epoch (MAX_RESTORE_WALL_CLOCK_MS, the end of 9999).
	MaxWallClockMs = 253_402_300_799_999
	// MaxIDChars is the longest allocation or placement ID, characters (MAX_GUEST_ID_CHARS).
	MaxIDChars = 160
	// MaxGeneration is the largest generation (JavaScript's Number.MAX_SAFE_INTEGER, as identity.Parse).
	MaxGeneration = 1<<53 - 1
)

var (
	idPattern    = pattern.MustCompile(`^[A-Za-z0-9._:-]+$`) // GUEST_ID_PATTERN
	noncePattern = pattern.MustCompile(`^[0-9a-f]{64}$`)     // GUEST_NONCE_PATTERN
)

// Restore is a checked restored message.
type Restore struct {
	Identity wire.Identity
	// Entropy is the decoded seed, MinEntropyBytes..MaxEntropyBytes bytes.
	Entropy []byte
	// WallClockMs is the host's wall clock when it sent the message, ms since the epoch.
	WallClockMs int64
	// PayloadAllowed is the fork flag: a payload consumed before the restore does not refuse a new one.
	PayloadAllowed bool
	// Network is the new placement's network; nil when the message has none.
	Network *Network
}

// Parse checks a host message of type restored against the schema's rules and
// returns it; the error names the first field that breaks them (`/field: why`).
func Parse(m wire.HostMessage) (Restore, error) {
	var r Restore
	id := func(name string, v *string) (string, error) {
		switch {
		case v == nil:
			return "", fmt.Errorf("/%s is missing", name)
		case len(*v) == 0 || len(*v) > MaxIDChars:
			return "", fmt.Errorf("/%s is %d characters, not 1..%d (MAX_GUEST_ID_CHARS)", name, len(*v), MaxIDChars)
		case !idPattern.MatchString(*v):
			return "", fmt.Errorf("/%s is not [A-Za-z0-9._:-]+", name)
		}
		return *v, nil
	}
	var err error
	if r.Identity.AllocationID, err = id("allocationId", m.AllocationID); err != nil {
		return r, err
	}
	if r.Identity.PlacementID, err = id("placementId", m.PlacementID); err != nil {
		return r, err
	}
	if m.Generation == nil || *m.Generation < 0 || *m.Generation > MaxGeneration {
		return r, fmt.Errorf("/generation is missing or not an integer in 0..2^53-1")
	}
	r.Identity.Generation = uint64(*m.Generation)
	if m.Nonce == nil || !noncePattern.MatchString(*m.Nonce) {
		return r, fmt.Errorf("/nonce is missing or not 64 lower-case hex digits")
	}
	r.Identity.Nonce = *m.Nonce
	if r.Entropy, err = entropy(m.EntropyBase64); err != nil {
		return r, err
	}
	if m.WallClockMs == nil || *m.WallClockMs < MinWallClockMs || *m.WallClockMs > MaxWallClockMs {
		return r, fmt.Errorf("/wallClockMs is missing or not in %d..%d ms since the epoch", int64(MinWallClockMs), int64(MaxWallClockMs))
	}
	r.WallClockMs = *m.WallClockMs
	r.PayloadAllowed = m.PayloadAllowed != nil && *m.PayloadAllowed
	if m.Network != nil {
		n, err := parseNetwork(*m.Network)
		if err != nil {
			return r, err
		}
		r.Network = &n
	}
	return r, nil
}

// entropy decodes entropyBase64 (padded standard base64), bounding its text before decoding.
func entropy(v *string) ([]byte, error) {
	if v == nil {
		return nil, fmt.Errorf("/entropyBase64 is missing")
	}
	if len(*v) > (MaxEntropyBytes+2)/3*4 {
		return nil, fmt.Errorf("/entropyBase64 is over %d bytes (MAX_RESTORE_ENTROPY_BYTES)", MaxEntropyBytes)
	}
	b, err := base64.StdEncoding.DecodeString(*v)
	if err != nil {
		return nil, fmt.Errorf("/entropyBase64 is not padded base64")
	}
	if len(b) < MinEntropyBytes || len(b) > MaxEntropyBytes {
		return nil, fmt.Errorf("/entropyBase64 holds %d bytes, not %d..%d (MIN_RESTORE_ENTROPY_BYTES)", len(b), MinEntropyBytes, MaxEntropyBytes)
	}
	return b, nil
}

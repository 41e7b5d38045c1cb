package restore

import (
	"encoding/base64"
	"strings"
	"testing"

	"beachball/guest/internal/wire"
)

func str(s string) *string { return &s }
func num(n int64) *int64   { return &n }

// good is a well-formed restored message; each test breaks one field.
func good() wire.HostMessage {
	return wire.HostMessage{Type: "restored", AllocationID: str("alloc_" + strings.Repeat("a", 32)), PlacementID: str("plc-1"),
		Generation: num(5), Nonce: str(strings.Repeat("cd", 32)),
		EntropyBase64: str(base64.StdEncoding.EncodeToString(make([]byte, MinEntropyBytes))), WallClockMs: num(1_800_000_000_000)}
}

func TestParseAcceptsTheSchemasMessageWithAndWithoutOptionalFields(t *testing.T) {
	r, err := Parse(good())
	if err != nil || r.Identity.Generation != 5 || len(r.Entropy) != MinEntropyBytes || r.PayloadAllowed || r.Network != nil {
		t.Fatalf("%+v %v", r, err)
	}
	m := good()
	yes := true
	m.PayloadAllowed = &yes
	m.Network = &wire.RestoredNetwork{IPv4CIDR: "10.0.0.2/30", IPv4Gateway: "10.0.0.1", IPv6Address: "fd00::3"}
	r, err = Parse(m)
	if err != nil || !r.PayloadAllowed || r.Network.IPv4.String() != "10.0.0.2/30" || r.Network.IPv4Gateway.String() != "10.0.0.1" || r.Network.IPv6.String() != "fd00::3" || r.Network.IPv6Router.String() != "fe80::1" {
		t.Fatalf("%+v %v", r, err)
	}
}

// Every bound of src/protocol/guestRestored.ts is a refusal naming its field, never a panic.
func TestParseRefusesEachOutOfBoundField(t *testing.T) {
	b64 := func(n int) *string { s := base64.StdEncoding.EncodeToString(make([]byte, n)); return &s }
	cases := map[string]func(m *wire.HostMessage){
		"/allocationId":   func(m *wire.HostMessage) { m.AllocationID = nil },
		"/allocationId ":  func(m *wire.HostMessage) { m.AllocationID = str(strings.Repeat("a", MaxIDChars+1)) },
		"/placementId":    func(m *wire.HostMessage) { m.PlacementID = str("has space") },
		"/placementId ":   func(m *wire.HostMessage) { m.PlacementID = str("") },
		"/generation":     func(m *wire.HostMessage) { m.Generation = num(-1) },
		"/generation ":    func(m *wire.HostMessage) { m.Generation = num(MaxGeneration + 1) },
		"/nonce":          func(m *wire.HostMessage) { m.Nonce = str(strings.Repeat("CD", 32)) },
		"/nonce ":         func(m *wire.HostMessage) { m.Nonce = str("ab") },
		"/entropyBase64":  func(m *wire.HostMessage) { m.EntropyBase64 = b64(MinEntropyBytes - 1) },
		"/entropyBase64 ": func(m *wire.HostMessage) { m.EntropyBase64 = b64(MaxEntropyBytes + 1) },
		"/entropyBase64  ": func(m *wire.HostMessage) {
			m.EntropyBase64 = str(strings.Repeat("A", 10*(MaxEntropyBytes+2)/3*4))
		},
		"/entropyBase64   ": func(m *wire.HostMessage) { m.EntropyBase64 = str(strings.Repeat("*", 44)) },
		"/wallClockMs":      func(m *wire.HostMessage) { m.WallClockMs = num(MinWallClockMs - 1) },
		"/wallClockMs ":     func(m *wire.HostMessage) { m.WallClockMs = num(MaxWallClockMs + 1) },
		"/network/ipv4Cidr": func(m *wire.HostMessage) { m.Network = &wire.RestoredNetwork{IPv4CIDR: "10.0.0.02/30"} },
		"/network/ipv4Cidr ": func(m *wire.HostMessage) {
			m.Network = &wire.RestoredNetwork{IPv4CIDR: "fd00::1/64"}
		},
		"/network/ipv4Gateway": func(m *wire.HostMessage) { m.Network = &wire.RestoredNetwork{IPv4Gateway: "10.0.0.1"} },
		"/network/ipv4Gateway ": func(m *wire.HostMessage) {
			m.Network = &wire.RestoredNetwork{IPv4CIDR: "10.0.0.2/30", IPv4Gateway: "10.0.1.1"}
		},
		"/network/ipv6Address":  func(m *wire.HostMessage) { m.Network = &wire.RestoredNetwork{IPv6Address: "fd00:0::3"} },
		"/network/ipv6Address ": func(m *wire.HostMessage) { m.Network = &wire.RestoredNetwork{IPv6Address: "fe80::3"} },
	}
	for name, breakIt := range cases {
		m := good()
		breakIt(&m)
		if _, err := Parse(m); err == nil || !strings.HasPrefix(err.Error(), strings.TrimSpace(name)+" ") {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

func TestRecorderRecordsAndCanRefuse(t *testing.T) {
	var r Recorder
	if how, err := r.AddEntropy([]byte{1, 2}); err != nil || !strings.Contains(how, "test mode") {
		t.Fatalf("%q %v", how, err)
	}
	r.RefuseEntropy(errTest)
	if _, err := r.AddEntropy([]byte{3}); err != errTest {
		t.Fatalf("%v", err)
	}
	if seeds, _ := r.Calls(); len(seeds) != 1 || seeds[0][1] != 2 {
		t.Fatalf("%v", seeds)
	}
}

type testErr struct{}

func (testErr) Error() string { return "refused for the test" }

var errTest error = testErr{}

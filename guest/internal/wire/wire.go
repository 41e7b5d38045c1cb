// Package wire holds the guest's half of the host–guest control protocol:
// the message shapes and names of src/protocol/guest.ts (the one definition;
// test/guest-contract.test.ts checks this package's output against its
// TypeBox schemas), the NDJSON encoding and the bounded line reader.
//
// Implements the spec's "Guest handshake" and the in-memory bootstrap
// hand-off of "One allocation end to end". Must never: accept a line over
// MaxLineBytes or write payload bytes anywhere but the stream.
package wire

import (
	"bytes"
	"encoding/json"
)

// MaxLineBytes is the upper bound of one NDJSON line in bytes (src/protocol/guest.ts
// MAX_GUEST_LINE_BYTES: a 1 MiB payload in base64 plus framing fits).
const MaxLineBytes = 2 * 1024 * 1024

// Names the image and the workload see (src/protocol/guest.ts, spec "Images").
const (
	// JobStartMarker is the console line written before the workload starts.
	JobStartMarker = "BEACHBALL_JOB_START"
	// JobExitMarker is written as `BEACHBALL_JOB_EXIT <code>` after the workload exits.
	JobExitMarker = "BEACHBALL_JOB_EXIT"
	// WorkloadConfigPath is where an image converted from OCI keeps its workload description.
	WorkloadConfigPath = "/etc/beachball/workload.json"
	// BootstrapPathEnv names the file that holds the delivered payload.
	BootstrapPathEnv = "BEACHBALL_BOOTSTRAP_PATH"
	// BootstrapContentTypeEnv carries the payload's content type.
	BootstrapContentTypeEnv = "BEACHBALL_BOOTSTRAP_CONTENT_TYPE"
	// WorkloadAdapterEnv names the program a systemd image hands the payload to.
	WorkloadAdapterEnv = "BEACHBALL_WORKLOAD_ADAPTER"
	// MaxWorkloadList is the most entries in any list of a workload description.
	MaxWorkloadList = 4096
	// MaxWorkloadStringBytes is the longest string of a workload description, bytes.
	MaxWorkloadStringBytes = 64 * 1024
)

// Identity is the guest identity the host put on the kernel command line
// (src/protocol/guest.ts GuestIdentity).
type Identity struct {
	AllocationID string
	PlacementID  string
	Generation   uint64
	// Nonce is the random 256-bit bootstrap nonce, hex; the agent accepts only an exact match.
	Nonce string
}

// GuestReady is the guest_ready message: the guest's identity, a random boot ID and its version.
type GuestReady struct {
	Type         string `json:"type"`
	BootID       string `json:"bootId"`
	GuestVersion string `json:"guestVersion"`
	AllocationID string `json:"allocationId"`
	PlacementID  string `json:"placementId"`
	Generation   uint64 `json:"generation"`
	Nonce        string `json:"nonce"`
}

// NewGuestReady builds guest_ready from an identity, a boot ID and a version.
func NewGuestReady(id Identity, bootID, version string) GuestReady {
	return GuestReady{"guest_ready", bootID, version, id.AllocationID, id.PlacementID, id.Generation, id.Nonce}
}

// Pong answers a ping with its id.
type Pong struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// BootstrapConsumed is the receipt of the one payload of a boot; digest is `sha256:<hex>`.
type BootstrapConsumed struct {
	Type       string `json:"type"`
	DeliveryID string `json:"deliveryId"`
	Digest     string `json:"digest"`
}

// BootstrapRejected refuses a payload, with a reason for people.
type BootstrapRejected struct {
	Type       string `json:"type"`
	DeliveryID string `json:"deliveryId"`
	Reason     string `json:"reason"`
}

// WorkloadStarted says the payload's workload runs.
type WorkloadStarted struct {
	Type       string `json:"type"`
	DeliveryID string `json:"deliveryId"`
}

// WorkloadExited carries the workload's exit code (128 + signal number when killed).
type WorkloadExited struct {
	Type       string `json:"type"`
	DeliveryID string `json:"deliveryId"`
	ExitCode   int    `json:"exitCode"`
}

// ShuttingDown is the guest's last message before sync(2) and reboot(2).
type ShuttingDown struct {
	Type string `json:"type"`
}

// HostMessage is any host→guest message, decoded loosely: Type says which
// fields matter (ready_ack, identify, ping, bootstrap, shutdown, control_config,
// restored). A field of the wrong JSON type makes the whole line invalid (it is skipped).
type HostMessage struct {
	Type             string            `json:"type"`
	ID               *string           `json:"id"`
	DeliveryID       *string           `json:"deliveryId"`
	ContentType      *string           `json:"contentType"`
	DataBase64       *string           `json:"dataBase64"`
	VerificationKeys map[string]string `json:"verificationKeys"`
	// The fields of restored (src/protocol/guestRestored.ts); package restore checks them.
	AllocationID   *string          `json:"allocationId"`
	PlacementID    *string          `json:"placementId"`
	Generation     *int64           `json:"generation"`
	Nonce          *string          `json:"nonce"`
	EntropyBase64  *string          `json:"entropyBase64"`
	WallClockMs    *int64           `json:"wallClockMs"`
	PayloadAllowed *bool            `json:"payloadAllowed"`
	Network        *RestoredNetwork `json:"network"`
}

// RestoredNetwork is the network object of restored (src/protocol/guestRestored.ts
// RestoredNetwork): the texts of beachball.ipv4, beachball.gateway and beachball.ipv6, "" when absent.
type RestoredNetwork struct {
	IPv4CIDR    string `json:"ipv4Cidr"`
	IPv4Gateway string `json:"ipv4Gateway"`
	IPv6Address string `json:"ipv6Address"`
}

// Encode renders one message as an NDJSON line (trailing newline), without
// HTML escaping (the same bytes JSON.stringify gives for these shapes).
func Encode(m interface{}) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// DecodeHost parses one line into a host message; ok is false when it is
// not a JSON object of the expected field types.
func DecodeHost(line []byte) (m HostMessage, ok bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return m, false
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return m, false
	}
	return m, true
}

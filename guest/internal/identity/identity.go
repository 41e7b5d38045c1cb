// Package identity reads the guest identity the host injected: the
// `beachball.*` arguments of /proc/cmdline plus the private arguments the
// initramfs left in /etc/beachball/kernel-args (src/protocol/guest.ts
// GUEST_CMDLINE_KEYS; spec "Start"). Must never: print the nonce.
package identity

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"beachball/guest/internal/kernelargs"
	"beachball/guest/internal/wire"
)

// Kernel command-line keys carrying the identity (src/protocol/guest.ts GUEST_CMDLINE_KEYS).
const (
	KeyAllocationID = "beachball.allocation_id"
	KeyPlacementID  = "beachball.placement_id"
	KeyGeneration   = "beachball.generation"
	KeyNonce        = "beachball.bootstrap_nonce"
)

// PrivateArgsFile is where the initramfs leaves private kernel arguments (src/agent/vmm/initrdFragment.ts).
const PrivateArgsFile = "/etc/beachball/kernel-args"

// MaxCmdlineBytes bounds what is read of each command-line file, bytes (Linux's COMMAND_LINE_SIZE is 2048 on x86; the private file is small too).
const MaxCmdlineBytes = 64 * 1024

// maxGeneration is the largest generation the host can send (JavaScript's Number.MAX_SAFE_INTEGER).
const maxGeneration = 1<<53 - 1

// Parse reads the identity from a kernel command line: whitespace-separated
// `key=value` tokens, the last one of a key winning. It fails when a key is
// missing or empty, or the generation is not a decimal integer in 0..2^53-1.
func Parse(cmdline string) (wire.Identity, error) {
	kv := kernelargs.Parse(cmdline)
	var missing error
	get := func(k string) string {
		v := kv[k]
		if v == "" && missing == nil {
			missing = fmt.Errorf("kernel command line lacks %s", k)
		}
		return v
	}
	id := wire.Identity{AllocationID: get(KeyAllocationID), PlacementID: get(KeyPlacementID), Nonce: get(KeyNonce)}
	gen := get(KeyGeneration)
	if missing != nil {
		return wire.Identity{}, missing
	}
	g, err := strconv.ParseUint(gen, 10, 64)
	if err != nil || g > maxGeneration {
		return wire.Identity{}, errors.New("bad " + KeyGeneration)
	}
	id.Generation = g
	return id, nil
}

// Read parses the identity from cmdlinePath (/proc/cmdline, or the test
// mode's file) followed by PrivateArgsFile when it exists.
func Read(cmdlinePath string) (wire.Identity, error) {
	cmd, err := readBounded(cmdlinePath)
	if err != nil {
		return wire.Identity{}, err
	}
	private, _ := readBounded(PrivateArgsFile)
	return Parse(cmd + " " + private)
}

func readBounded(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, MaxCmdlineBytes)
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		n += m
		if err != nil || m == 0 {
			break
		}
	}
	return string(buf[:n]), nil
}

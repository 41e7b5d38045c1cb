// Package kernelargs reads a kernel command line (/proc/cmdline, or the
// private arguments the initramfs kept) the way every part of the guest
// does: whitespace-separated tokens, those of the form `key=value` kept, the
// last one of a key winning (the kernel's own rule for repeated options).
// Bare words and `=value` tokens are skipped.
package kernelargs

import "strings"

// Parse returns the `key=value` tokens of cmdline as a map.
func Parse(cmdline string) map[string]string {
	kv := map[string]string{}
	for _, tok := range strings.Fields(cmdline) {
		if eq := strings.IndexByte(tok, '='); eq > 0 {
			kv[tok[:eq]] = tok[eq+1:]
		}
	}
	return kv
}

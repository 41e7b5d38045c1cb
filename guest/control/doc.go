// Package control is the guest's control service (issue 20, "Exec and
// files"; docs/exec-and-files.md): an HTTP/1.1 server on the allocation's
// private address, port 7390 (GUEST_CONTROL_PORT in src/protocol/control.ts),
// that runs commands (execs with an append-only output log addressed by byte
// offset, stdin by offset, signals, PTY resize) and moves files (stat, list,
// ranged read, resumable write checked by SHA-256, mkdir, move, remove, tar
// both ways) inside configured allowed roots.
//
// Every request carries a signed connection grant in the `beachball-grant`
// header, verified here exactly as src/protocol/connectionSignature.ts does
// (grant.go, canonical.go). The wire shapes are defined once in
// src/protocol/control.ts (TypeBox); the numbers in bounds.go are the same.
//
// The lead's guest main uses it as:
//
//	srv := control.New(control.Config{...})
//	srv.SetKeys(keys) // from each control_config message (ParseControlConfig)
//	go srv.Serve(listener)
//
// Must never: act on a request whose grant does not verify, touch a path
// outside the allowed roots, signal a process because a client went away,
// hold a file or an output log whole in memory.
package control

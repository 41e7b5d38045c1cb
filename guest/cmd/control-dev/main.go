// Command control-dev serves the guest's control service (package control)
// on a TCP address, outside any VM, for tests on loopback: the TS contract
// and integration tests build it and drive it with src/client/control.ts.
//
//	control-dev -listen 127.0.0.1:0 -roots /tmp/a,/tmp/b -run-dir /tmp/run \
//	  -keys keys.json -allocation alloc_... -generation 1 -loopback-testing
//
// It prints `listening <host:port>` on stdout once it accepts connections.
// The keys file holds one control_config message (ControlConfigMessage,
// src/protocol/control.ts); SIGHUP re-reads it. Until the file exists the
// service answers GUEST_NOT_READY, as the guest does before control_config. Must never: be shipped in
// an image (the guest main starts the service itself).
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"beachball/guest/control"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "TCP address to listen on")
	roots := flag.String("roots", "", "comma-separated absolute directories the files routes may touch")
	runDir := flag.String("run-dir", "", "directory for exec output logs (required)")
	keysPath := flag.String("keys", "", "file holding one control_config message (required)")
	alloc := flag.String("allocation", "", "the allocation ID grants must name (required)")
	generation := flag.Int64("generation", 1, "the generation grants must name")
	loopback := flag.Bool("loopback-testing", false, "skip the check that the TCP peer is the grant's clientAddress")
	flag.Parse()
	if *runDir == "" || *keysPath == "" || *alloc == "" {
		fmt.Fprintln(os.Stderr, "control-dev: -run-dir, -keys and -allocation are required")
		os.Exit(2)
	}
	var rootList []string
	for _, r := range strings.Split(*roots, ",") {
		if r != "" {
			rootList = append(rootList, r)
		}
	}
	srv := control.New(control.Config{AllocationID: *alloc, Generation: *generation, Roots: rootList,
		RunDir: *runDir, LoopbackTesting: *loopback})
	load := func() error {
		text, err := os.ReadFile(*keysPath)
		if err != nil {
			return err
		}
		keys, err := control.ParseControlConfig(text)
		if err != nil {
			return err
		}
		srv.SetKeys(keys)
		return nil
	}
	if _, err := os.Stat(*keysPath); err == nil {
		if err := load(); err != nil {
			fmt.Fprintln(os.Stderr, "control-dev:", err)
			os.Exit(1)
		}
	} // else: no keys yet (GUEST_NOT_READY) until the file appears and SIGHUP arrives

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			if err := load(); err != nil {
				fmt.Fprintln(os.Stderr, "control-dev:", err)
			}
		}
	}()
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "control-dev:", err)
		os.Exit(1)
	}
	fmt.Printf("listening %s\n", l.Addr())
	fmt.Fprintln(os.Stderr, "control-dev:", srv.Serve(l))
	os.Exit(1)
}

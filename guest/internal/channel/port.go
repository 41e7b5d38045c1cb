// Package channel is the guest's end of the control channel: the
// virtio-serial port named `ctl`, opened once read-write and kept open
// (docs/architecture.md, "Booting without KVM": reopening around the host's
// connect lost a reply and hung the guest), or in test mode a Unix socket.
//
// While the host side is disconnected, reads of the port return EOF and
// writes block in the kernel; the reader therefore sleeps after EOF and
// reads again. Writes are serialized through one writer with a bounded
// queue. Must never: close and reopen the port, or buffer without bound.
package channel

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ControlPortName is the name of the control port (QEMU `virtserialport,name=ctl`).
const ControlPortName = "ctl"

// PortPollInterval is how often FindControlPort looks again for the port, ms.
const PortPollInterval = 50 * time.Millisecond

// EOFRetry is the sleep after an EOF (host not connected) before reading again.
const EOFRetry = 50 * time.Millisecond

// ReadChunkBytes is the read buffer size, bytes.
const ReadChunkBytes = 64 * 1024

// virtioPortsDir lists the virtio-serial ports with their names.
const virtioPortsDir = "/sys/class/virtio-ports"

// FindControlPort returns /dev/vportNpM whose sysfs name is `ctl`, waiting
// up to timeout for it to appear; it fails when it does not.
func FindControlPort(timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		entries, _ := os.ReadDir(virtioPortsDir)
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(virtioPortsDir, e.Name(), "name"))
			if err == nil && strings.TrimSpace(string(b)) == ControlPortName {
				return "/dev/" + e.Name(), nil
			}
		}
		if time.Now().After(deadline) {
			return "", errors.New("no virtio port named " + ControlPortName)
		}
		time.Sleep(PortPollInterval)
	}
}

// Stream is a byte stream to the host: Read returning 0 or io.EOF means "host away" for a port.
type Stream interface {
	Read(p []byte) (int, error)
	Write(p []byte) (int, error)
}

// OpenPort opens the port at path read-write, once, in blocking mode (so
// Go's poller never sees it: a virtio port without a host reports hang-up
// to poll(2) while its writes would block).
func OpenPort(path string) (Stream, error) {
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CLOEXEC|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// DialTestSocket connects to the Unix socket at path (test mode: the
// contract test plays the host there).
func DialTestSocket(path string) (Stream, error) {
	return net.Dial("unix", path)
}

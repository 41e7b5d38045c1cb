package control

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// winsize is struct winsize of <asm-generic/termios.h>.
type winsize struct{ Row, Col, X, Y uint16 }

// ioctl runs ioctl(2) on f's descriptor without taking it out of Go's poller.
func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if cerr := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg))
	}); cerr != nil {
		return cerr
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// openPty opens a new terminal pair through /dev/ptmx (unlockpt, ptsname by
// TIOCGPTN; no cgo) sized cols×rows; the caller closes both.
func openPty(cols, rows int) (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var unlock int32
	var n uint32
	if err = ioctl(master, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err == nil {
		err = ioctl(master, syscall.TIOCGPTN, unsafe.Pointer(&n))
	}
	if err == nil {
		slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	}
	if err == nil {
		err = resizePty(master, cols, rows)
	}
	if err != nil {
		_ = master.Close()
		if slave != nil {
			_ = slave.Close()
		}
		return nil, nil, err
	}
	return master, slave, nil
}

// resizePty sets the terminal's size (TIOCSWINSZ); the kernel sends SIGWINCH to its foreground group.
func resizePty(master *os.File, cols, rows int) error {
	ws := winsize{Row: uint16(rows), Col: uint16(cols)}
	return ioctl(master, syscall.TIOCSWINSZ, unsafe.Pointer(&ws))
}

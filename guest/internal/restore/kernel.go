package restore

import (
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// The random(4) ioctls (include/uapi/linux/random.h; the same numbers on amd64 and arm64).
const (
	// rndAddEntropy is RNDADDENTROPY, _IOW('R', 0x03, int[2]): mix and credit a rand_pool_info (CAP_SYS_ADMIN).
	rndAddEntropy = 0x40085203
	// rndReseedCRNG is RNDRESEEDCRNG, _IO('R', 0x07): reseed the CRNG from the pool now (CAP_SYS_ADMIN; Linux 4.17+).
	rndReseedCRNG = 0x5207
)

// DevURandom is the device both ioctls and the fallback write go to.
const DevURandom = "/dev/urandom"

// Kernel is the System of a VM: random(4) and settimeofday(2) (the guest is root, PID 1).
type Kernel struct{}

// AddEntropy adds seed with RNDADDENTROPY (credited at 8 bits a byte), then asks
// for a CRNG reseed with RNDRESEEDCRNG: since Linux 5.18 new input reaches
// getrandom(2) only at the next reseed (up to a minute away), and until then two
// forks of one snapshot would draw the same numbers. When the ioctl is refused it
// writes seed to /dev/urandom instead (mixed in, not credited; RNDADDTOENTCNT, which
// would credit it, needs the same CAP_SYS_ADMIN and is not tried). The error says
// why neither worked.
func (Kernel) AddEntropy(seed []byte) (string, error) {
	f, err := os.OpenFile(DevURandom, os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }, native byte order.
	info := make([]byte, 8+len(seed))
	*(*int32)(unsafe.Pointer(&info[0])) = int32(8 * len(seed))
	*(*int32)(unsafe.Pointer(&info[4])) = int32(len(seed))
	copy(info[8:], seed)
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), rndAddEntropy, uintptr(unsafe.Pointer(&info[0]))); e != 0 {
		if _, werr := f.Write(seed); werr != nil {
			return "", fmt.Errorf("RNDADDENTROPY refused (%v) and writing %s failed: %v", e, DevURandom, werr)
		}
		return fmt.Sprintf("%d bytes written to %s (RNDADDENTROPY refused: %v; mixed in, not credited)%s",
			len(seed), DevURandom, e, reseed(f)), nil
	}
	return fmt.Sprintf("%d bytes added with RNDADDENTROPY%s", len(seed), reseed(f)), nil
}

// reseed runs RNDRESEEDCRNG on f and says how it went, for the console.
func reseed(f *os.File) string {
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), rndReseedCRNG, 0); e != 0 {
		return fmt.Sprintf("; CRNG reseed refused: %v", e)
	}
	return "; CRNG reseeded"
}

// StepClock sets CLOCK_REALTIME to t with settimeofday(2) (microseconds; CLOCK_MONOTONIC is untouched).
func (Kernel) StepClock(t time.Time) error {
	tv := syscall.Timeval{Sec: t.Unix(), Usec: int64(t.Nanosecond() / 1000)}
	return syscall.Settimeofday(&tv)
}

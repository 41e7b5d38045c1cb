package restore

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// childEnv marks the re-executed test binary that runs inside a user namespace.
const childEnv = "BB_RESTORE_TEST_USERNS_CHILD"

// Kernel's fallback, for real: in a new user namespace the ioctls need CAP_SYS_ADMIN in the
// initial one and are refused, so the seed is written to /dev/urandom (which anyone may do:
// fresh random bytes, nothing credited) and the console text says so; settimeofday is refused
// too. The privileged paths (RNDADDENTROPY, the reseed, a clock step) run only inside a VM
// (test/integration/vm.test.ts): a test must not credit the host's pool or move its clock.
func TestKernelAddEntropyFallsBackToAWriteWhenTheIoctlIsRefused(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		seed := make([]byte, MinEntropyBytes)
		if _, err := rand.Read(seed); err != nil {
			fmt.Println("error:", err)
			return
		}
		how, err := Kernel{}.AddEntropy(seed)
		fmt.Printf("how=%s err=%v\n", how, err)
		// Refused here (no CAP_SYS_TIME in the initial namespace); it would be the present time anyway.
		fmt.Printf("clock=%v\n", Kernel{}.StepClock(time.Now()))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKernelAddEntropyFallsBackToAWriteWhenTheIoctlIsRefused$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(err.Error(), "operation not permitted") {
		t.Skipf("no user namespaces here: %v", err)
	}
	want := "how=32 bytes written to /dev/urandom (RNDADDENTROPY refused: operation not permitted; mixed in, not credited); CRNG reseed refused: operation not permitted err=<nil>"
	if err != nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), "clock=operation not permitted") {
		t.Fatalf("%v\n%s", err, out)
	}
}

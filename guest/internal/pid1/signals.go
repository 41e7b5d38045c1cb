package pid1

import (
	"os"
	"os/signal"
	"syscall"
)

// ForwardedSignals are the signals PID 1 passes on to the running workload.
var ForwardedSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// Forward catches ForwardedSignals and sends each to target() (the running
// workload's PID, 0 when none: the signal is then dropped, as PID 1 ignores it).
func Forward(target func() int) {
	ch := make(chan os.Signal, len(ForwardedSignals))
	signal.Notify(ch, ForwardedSignals...)
	go func() {
		for s := range ch {
			if pid := target(); pid > 0 {
				syscall.Kill(pid, s.(syscall.Signal))
			}
		}
	}()
}

// PowerOff flushes the file systems with sync(2) and resets the machine with
// reboot(2) RB_AUTOBOOT (with -no-reboot QEMU then exits). It returns only when reboot(2) failed.
func PowerOff() error {
	syscall.Sync()
	return syscall.Reboot(syscall.LINUX_REBOOT_CMD_RESTART)
}

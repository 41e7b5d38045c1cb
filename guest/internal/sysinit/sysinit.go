// Package sysinit is what an init does before the guest's own work when
// beachball-guest is the first program of an image's root (the dev image's
// /sbin/beachball-init, a link to the guest binary): the mount table, the
// standard /dev links, the host name, and the network of the kernel command
// line (guest/internal/netconf) with its resolv.conf. It replaces the shell
// script that did the same with some twenty forks of mount, ln, ip and grep,
// which cost 200–300 ms under TCG before the guest started
// (docs/adr/0170-static-go-guest.md).
//
// Must never: stop at a failed step (each is reported and the next tried, as
// the script did: a guest without a network can still say why over its
// port), or configure anything the command line did not name.
package sysinit

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"beachball/guest/internal/netconf"
)

// Hostname is the guest's host name (every image uses the same one).
const Hostname = "beachball"

// Mount is one file system of the guest's table.
type Mount struct {
	// Source, Target, FSType and Data are mount(2)'s arguments; Flags its mount flags.
	Source, Target, FSType, Data string
	// Flags are mount(2)'s flags (MS_*).
	Flags uintptr
	// Mode is the target directory's mode when it has to be created.
	Mode os.FileMode
}

// Table is the dev image's mount table, in order. /proc, /sys and /dev are
// usually there already (the initramfs moves its own into the new root);
// Run mounts only what is not.
var Table = []Mount{
	{Source: "proc", Target: "/proc", FSType: "proc", Flags: syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC, Mode: 0o555},
	{Source: "sysfs", Target: "/sys", FSType: "sysfs", Flags: syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC, Mode: 0o555},
	{Source: "devtmpfs", Target: "/dev", FSType: "devtmpfs", Flags: syscall.MS_NOSUID, Mode: 0o755},
	{Source: "devpts", Target: "/dev/pts", FSType: "devpts", Data: "newinstance,ptmxmode=0666,mode=0620,gid=5", Flags: syscall.MS_NOSUID | syscall.MS_NOEXEC, Mode: 0o755},
	{Source: "shm", Target: "/dev/shm", FSType: "tmpfs", Data: "mode=1777", Flags: syscall.MS_NOSUID | syscall.MS_NODEV, Mode: 0o777 | os.ModeSticky},
	{Source: "tmpfs", Target: "/tmp", FSType: "tmpfs", Data: "mode=1777", Flags: syscall.MS_NOSUID | syscall.MS_NODEV, Mode: 0o777 | os.ModeSticky},
	{Source: "tmpfs", Target: "/run", FSType: "tmpfs", Data: "mode=755", Flags: syscall.MS_NOSUID | syscall.MS_NODEV, Mode: 0o755},
}

// DevLinks are the symbolic links every /dev has (link → target).
var DevLinks = [][2]string{
	{"/dev/fd", "/proc/self/fd"},
	{"/dev/stdin", "/proc/self/fd/0"},
	{"/dev/stdout", "/proc/self/fd/1"},
	{"/dev/stderr", "/proc/self/fd/2"},
}

// Mounts brings the file systems up: the mount table (skipping what is
// mounted), the /dev links and the host name. It returns one message per
// failed step (empty when all took); the caller prints them.
func Mounts() []string {
	var failed steps
	mounted := mountPoints()
	for _, m := range Table {
		if mounted[m.Target] {
			continue
		}
		if err := os.MkdirAll(m.Target, m.Mode); err != nil {
			failed.add("mkdir "+m.Target, err)
			continue
		}
		failed.add("mount "+m.Target, syscall.Mount(m.Source, m.Target, m.FSType, m.Flags, m.Data))
		if m.Target == "/proc" {
			mounted = mountPoints()
		}
	}
	for _, l := range DevLinks {
		if t, err := os.Readlink(l[0]); err == nil && t == l[1] {
			continue
		}
		os.Remove(l[0])
		failed.add("link "+l[0], os.Symlink(l[1], l[0]))
	}
	failed.add("hostname", syscall.Sethostname([]byte(Hostname)))
	return failed
}

// Network configures the network the kernel command line names
// (netconf.FromCmdline, netconf.Apply) and writes root's /etc/resolv.conf,
// always: a value that does not parse is reported and only its own part left
// out. It returns one message per problem or failed step, like Mounts.
func Network(cmdline, root string) []string {
	c, problems := netconf.FromCmdline(cmdline)
	failed := steps(append([]string(nil), problems...))
	failed.add("network", netconf.Apply(c))
	failed.add("resolv.conf", netconf.WriteResolvConf(root, c.DNS))
	return failed
}

// steps collects the messages of failed steps.
type steps []string

func (s *steps) add(step string, err error) {
	if err != nil {
		*s = append(*s, step+": "+err.Error())
	}
}

// mountPoints are the mount points of /proc/self/mounts (empty before /proc is mounted).
func mountPoints() map[string]bool {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return map[string]bool{}
	}
	return parseMountPoints(string(b))
}

// parseMountPoints reads the second field of each /proc/mounts line (octal escapes such as \040 decoded).
func parseMountPoints(text string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			out[filepath.Clean(unescape(f[1]))] = true
		}
	}
	return out
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

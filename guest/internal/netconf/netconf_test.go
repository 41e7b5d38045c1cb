package netconf

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

func TestFromCmdlineReadsTheAgentsKeysAndReportsBadValuesKeepingTheRest(t *testing.T) {
	c, problems := FromCmdline("console=ttyS0 beachball.ipv4=10.0.0.2/30 beachball.gateway=10.0.0.1 beachball.dns=10.0.0.1,9.9.9.9 beachball.ipv6=fd00:bb::7 beachball.ipv6_router=fe80::1 quiet")
	if problems != nil || c.IPv4.String() != "10.0.0.2/30" || c.IPv4Gateway.String() != "10.0.0.1" || c.IPv6.String() != "fd00:bb::7" ||
		c.IPv6Router.String() != "fe80::1" || len(c.DNS) != 2 || c.DNS[1].String() != "9.9.9.9" {
		t.Fatalf("%+v %v", c, problems)
	}
	if ResolvConf(c.DNS) != "nameserver 10.0.0.1\nnameserver 9.9.9.9\n" {
		t.Fatal(ResolvConf(c.DNS))
	}
	c, problems = FromCmdline("console=ttyS0 quiet")
	if problems != nil || c.IPv4 != nil || c.IPv6 != nil || c.DNS != nil {
		t.Fatalf("%+v %v", c, problems)
	}
	for _, bad := range []string{"beachball.ipv4=10.0.0.2", "beachball.ipv4=fd00::1/64", "beachball.gateway=fd00::1", "beachball.ipv6=10.0.0.1",
		"beachball.ipv6_router=x", "beachball.dns=10.0.0.1,x"} {
		if _, problems := FromCmdline(bad); len(problems) != 1 || !strings.Contains(problems[0], strings.SplitN(bad, "=", 2)[0]) {
			t.Errorf("%s: %v", bad, problems)
		}
	}
	// One bad value (a resolver with a leading zero, which Go refuses) costs only itself.
	c, problems = FromCmdline("beachball.ipv4=10.0.0.2/30 beachball.gateway=10.0.0.1 beachball.dns=010.0.0.1,10.0.0.1 beachball.ipv6=nope")
	if len(problems) != 2 || c.IPv4 == nil || c.IPv4Gateway == nil || c.IPv6 != nil || len(c.DNS) != 1 || c.DNS[0].String() != "10.0.0.1" {
		t.Fatalf("%+v %v", c, problems)
	}
}

func TestWriteResolvConfReplacesASymlinkInsteadOfFollowingIt(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	outside := filepath.Join(root, "outside")
	os.WriteFile(outside, []byte("keep\n"), 0o644)
	os.Symlink(outside, filepath.Join(root, "etc/resolv.conf"))
	if err := WriteResolvConf(root, []net.IP{net.ParseIP("10.0.0.1")}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/resolv.conf")); string(b) != "nameserver 10.0.0.1\n" {
		t.Fatalf("%q", b)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep\n" {
		t.Fatalf("followed the link: %q", b)
	}
}

// inNetns runs f on a thread moved into a new network namespace holding an `eth0` (one end of a veth pair, its peer up)
// (so nothing of the host is touched); commands f starts inherit that namespace.
func inNetns(t *testing.T, f func()) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace of its own and a veth eth0); test/run.sh runs it as root in CI")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine instead of returning to the pool in the namespace
		if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
			t.Errorf("unshare(CLONE_NEWNET): %v", err)
			return
		}
		for _, args := range [][]string{{"link", "add", Interface, "type", "veth", "peer", "name", "peer0"}, {"link", "set", "peer0", "up"}} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Errorf("ip %v: %v %s", args, err, out)
				return
			}
		}
		f()
	}()
	<-done
}

func run(t *testing.T, args ...string) string {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Errorf("%v: %v %s", args, err, out)
	}
	return string(out)
}

func TestApplyConfiguresLoopbackEth0AddressesAndDefaultRoutesInANamespace(t *testing.T) {
	inNetns(t, func() {
		// /proc/sys/net is the opening thread's namespace's: these are the new eth0's, not the host's.
		sysctl := func(k string) string {
			b, _ := os.ReadFile(filepath.Join(SysctlDir, k))
			return strings.TrimSpace(string(b))
		}
		if sysctl("accept_dad") == "0" {
			t.Errorf("a new eth0 starts with accept_dad 0: the test proves nothing")
		}
		c, _ := FromCmdline("beachball.ipv4=10.0.0.2/30 beachball.gateway=10.0.0.1 beachball.ipv6=fd00:bb::7 beachball.ipv6_router=fe80::1")
		if err := Apply(c); err != nil {
			t.Errorf("Apply: %v", err)
		}
		if err := Apply(c); err != nil { // again (a restore on the same placement): addresses present, routes replaced
			t.Errorf("Apply again: %v", err)
		}
		for _, k := range ipv6Sysctls {
			if v := sysctl(k); v != "0" {
				t.Errorf("%s = %q", k, v)
			}
		}
		if out := run(t, "ip", "-o", "link", "show", "lo"); !strings.Contains(out, "UP") {
			t.Errorf("lo: %s", out)
		}
		if out := run(t, "ip", "-o", "link", "show", Interface); !strings.Contains(out, ",UP") {
			t.Errorf("eth0: %s", out)
		}
		addrs := run(t, "ip", "-o", "addr", "show", "dev", Interface)
		for _, want := range []string{"inet 10.0.0.2/30 scope global eth0", "inet6 fd00:bb::7/128 scope global nodad"} {
			if !strings.Contains(addrs, want) {
				t.Errorf("no %q in %s", want, addrs)
			}
		}
		if strings.Contains(addrs, "tentative") {
			t.Errorf("DAD ran: %s", addrs)
		}
		if out := run(t, "ip", "-4", "route", "show", "default"); !strings.Contains(out, "default via 10.0.0.1 dev eth0") {
			t.Errorf("IPv4 route: %q", out)
		}
		if out := run(t, "ip", "-6", "route", "show", "default"); !strings.Contains(out, "default via fe80::1 dev eth0") {
			t.Errorf("IPv6 route: %q", out)
		}
	})
}

func TestApplyWithoutAddressesOnlyBringsLoopbackUpAndAMissingEth0IsAnError(t *testing.T) {
	inNetns(t, func() {
		if err := Apply(Config{}); err != nil {
			t.Errorf("Apply: %v", err)
		}
		if out := run(t, "ip", "-o", "link", "show", Interface); strings.Contains(out, ",UP") {
			t.Errorf("eth0 brought up with nothing to configure: %s", out)
		}
		run(t, "ip", "link", "del", Interface)
		_, n, _ := net.ParseCIDR("10.0.0.2/30")
		n.IP = net.ParseIP("10.0.0.2").To4()
		if err := Apply(Config{IPv4: n}); err == nil || !strings.Contains(err.Error(), "eth0 up") {
			t.Errorf("Apply without eth0: %v", err)
		}
	})
}

func TestLiveApplyMovesEth0ToAForksAddressAndForgetsTheRoutersNeighbourEntries(t *testing.T) {
	inNetns(t, func() {
		boot, _ := FromCmdline("beachball.ipv4=10.0.0.2/30 beachball.gateway=10.0.0.1 beachball.ipv6=fd00:bb::7 beachball.ipv6_router=fe80::1")
		if err := Apply(boot); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		// The entries a restored VM wakes with: its parent's host TAP's MAC for both routers.
		run(t, "ip", "neigh", "replace", "10.0.0.1", "lladdr", "02:00:00:00:00:01", "dev", Interface)
		run(t, "ip", "neigh", "replace", "fe80::1", "lladdr", "02:00:00:00:00:01", "dev", Interface)
		l := NewLive(boot)
		same, _ := FromCmdline("beachball.ipv6=fd00:bb::7")
		if err := l.Apply(same); err != nil { // a resume on its own placement: nothing moves
			t.Errorf("Apply same: %v", err)
		}
		if out := run(t, "ip", "neigh", "show", "dev", Interface); strings.Contains(out, "02:00:00:00:00:01") {
			t.Errorf("neighbour entries kept: %s", out)
		}
		fork, _ := FromCmdline("beachball.ipv6=fd00:bb::9")
		if err := l.Apply(Config{IPv6: fork.IPv6, IPv6Router: net.ParseIP("fe80::1")}); err != nil {
			t.Errorf("Apply fork: %v", err)
		}
		addrs := run(t, "ip", "-o", "addr", "show", "dev", Interface)
		if !strings.Contains(addrs, "inet6 fd00:bb::9/128") || strings.Contains(addrs, "fd00:bb::7") {
			t.Errorf("addresses after the move: %s", addrs)
		}
		if !strings.Contains(addrs, "inet 10.0.0.2/30") {
			t.Errorf("IPv4 lost: %s", addrs)
		}
		if out := run(t, "ip", "-6", "route", "show", "default"); !strings.Contains(out, "default via fe80::1 dev eth0") {
			t.Errorf("IPv6 route: %q", out)
		}
		if c := l.Current(); !c.IPv6.Equal(fork.IPv6) || c.IPv4 == nil {
			t.Errorf("Current: %+v", c)
		}
		moved, _ := FromCmdline("beachball.ipv4=10.0.1.2/30 beachball.gateway=10.0.1.1")
		if err := l.Apply(moved); err != nil {
			t.Errorf("Apply IPv4 move: %v", err)
		}
		addrs = run(t, "ip", "-o", "addr", "show", "dev", Interface)
		if !strings.Contains(addrs, "inet 10.0.1.2/30") || strings.Contains(addrs, "10.0.0.2") {
			t.Errorf("IPv4 after the move: %s", addrs)
		}
		if out := run(t, "ip", "-4", "route", "show", "default"); !strings.Contains(out, "default via 10.0.1.1 dev eth0") {
			t.Errorf("IPv4 route: %q", out)
		}
	})
}

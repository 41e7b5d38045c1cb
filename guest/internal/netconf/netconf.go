// Package netconf configures the guest's network over rtnetlink (NETLINK_ROUTE,
// netlink(7), rtnetlink(7)) with plain system calls: loopback up, eth0 up, its
// IPv4 address and default route, its private IPv6 /128 and default route via
// the host's link-local router, and eth0's IPv6 sysctls. It replaces the `ip`
// commands the init scripts ran, each a fork and exec of a dynamically linked
// program (tens of milliseconds apiece under TCG).
//
// The settings come from the kernel command line the agent wrote
// (src/agent/isolation/placementNet.ts; keys in src/protocol/guest.ts) or, on a
// restore, from the host's restored message (guest/internal/restore). Must
// never: configure an address, route or resolver it was not given, or send a
// packet (it only talks to the kernel).
package netconf

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"beachball/guest/internal/kernelargs"
)

// Interface is the guest's one network interface (the virtio-net device on the placement's TAP).
const Interface = "eth0"

// Kernel command-line keys: the IPv4 ones as src/agent/isolation/placementNet.ts writes them, the IPv6
// ones src/protocol/guest.ts GUEST_IPV6_KEYS.
const (
	KeyIPv4       = "beachball.ipv4"
	KeyGateway    = "beachball.gateway"
	KeyDNS        = "beachball.dns"
	KeyIPv6       = "beachball.ipv6"
	KeyIPv6Router = "beachball.ipv6_router"
)

// SysctlDir is where eth0's IPv6 sysctls live; a variable so tests can point it elsewhere.
var SysctlDir = "/proc/sys/net/ipv6/conf/" + Interface

// ipv6Sysctls are switched off before eth0 comes up: no router advertisements or
// autoconfiguration (the one route is the one given) and no duplicate address
// detection (each address belongs to one allocation; a tentative address would
// refuse connections for a second or more under TCG). docs/connect.md.
var ipv6Sysctls = []string{"accept_ra", "autoconf", "accept_dad"}

// Config is eth0's configuration. A nil field leaves that part as it is.
type Config struct {
	// IPv4 is eth0's address (4-byte IP) and prefix (beachball.ipv4, a CIDR).
	IPv4 *net.IPNet
	// IPv4Gateway is the default route's gateway, inside IPv4's prefix (beachball.gateway).
	IPv4Gateway net.IP
	// IPv6 is eth0's private address, configured as a /128 (beachball.ipv6).
	IPv6 net.IP
	// IPv6Router is the IPv6 default route's gateway (beachball.ipv6_router; the host's fe80::1).
	IPv6Router net.IP
	// DNS are the resolvers for resolv.conf, in order (beachball.dns, comma-separated).
	DNS []net.IP
}

// FromCmdline reads a Config from a kernel command line's whitespace-separated
// `key=value` tokens (the last one of a key wins). A value that does not parse
// leaves its field nil (a resolver that does not parse is left out) and adds
// a problem naming its key; the rest of the Config still holds, so one bad
// value never costs the guest its loopback, its other address or its routes.
func FromCmdline(cmdline string) (Config, []string) {
	var c Config
	var problems []string
	bad := func(key, v, what string) { problems = append(problems, fmt.Sprintf("%s=%q is not %s", key, v, what)) }
	kv := kernelargs.Parse(cmdline)
	if v := kv[KeyIPv4]; v != "" {
		if ip, p, err := net.ParseCIDR(v); err == nil && ip.To4() != nil {
			c.IPv4 = &net.IPNet{IP: ip.To4(), Mask: p.Mask}
		} else {
			bad(KeyIPv4, v, "an IPv4 CIDR")
		}
	}
	if v := kv[KeyGateway]; v != "" {
		if c.IPv4Gateway = net.ParseIP(v).To4(); c.IPv4Gateway == nil {
			bad(KeyGateway, v, "an IPv4 address")
		}
	}
	if v := kv[KeyIPv6]; v != "" {
		if c.IPv6 = net.ParseIP(v); c.IPv6 == nil || c.IPv6.To4() != nil {
			c.IPv6 = nil
			bad(KeyIPv6, v, "an IPv6 address")
		}
	}
	if v := kv[KeyIPv6Router]; v != "" {
		if c.IPv6Router = net.ParseIP(v); c.IPv6Router == nil || c.IPv6Router.To4() != nil {
			c.IPv6Router = nil
			bad(KeyIPv6Router, v, "an IPv6 address")
		}
	}
	if v := kv[KeyDNS]; v != "" {
		for _, s := range strings.Split(v, ",") {
			if ip := net.ParseIP(s); ip != nil {
				c.DNS = append(c.DNS, ip)
			} else {
				bad(KeyDNS, s, "an IP address (left out)")
			}
		}
	}
	return c, problems
}

// ResolvConf is the text of /etc/resolv.conf for the resolvers: one
// `nameserver` line each, empty when there are none.
func ResolvConf(dns []net.IP) string {
	var b strings.Builder
	for _, ip := range dns {
		b.WriteString("nameserver " + ip.String() + "\n")
	}
	return b.String()
}

// WriteResolvConf replaces root/etc/resolv.conf with ResolvConf(dns) (a
// symlink there is removed, not followed: an image's link into /run would
// otherwise point the write elsewhere).
func WriteResolvConf(root string, dns []net.IP) error {
	p := filepath.Join(root, "etc/resolv.conf")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(p, []byte(ResolvConf(dns)), 0o644)
}

// Apply configures the boot network: with IPv6, eth0's sysctls off before it
// comes up; loopback up; eth0 up with the addresses and default routes of c.
// Every step is tried; the error joins the steps that failed (nil when all
// took). Resolvers are not written here (WriteResolvConf: they live in a root).
func Apply(c Config) error {
	var errs []string
	fail := func(step string, err error) {
		if err != nil {
			errs = append(errs, step+": "+err.Error())
		}
	}
	if c.IPv6 != nil {
		for _, k := range ipv6Sysctls {
			fail("IPv6 "+k+" off on "+Interface, os.WriteFile(filepath.Join(SysctlDir, k), []byte("0\n"), 0o644))
		}
	}
	nl, err := Open()
	if err != nil {
		fail("netlink", err)
		return joined(errs)
	}
	defer nl.Close()
	fail("lo up", nl.LinkUp("lo"))
	if c.IPv4 == nil && c.IPv6 == nil {
		return joined(errs)
	}
	fail(Interface+" up", nl.LinkUp(Interface))
	if c.IPv4 != nil {
		ones, _ := c.IPv4.Mask.Size()
		fail(Interface+" IPv4 address", nl.AddAddress(Interface, c.IPv4.IP, ones))
		if c.IPv4Gateway != nil {
			fail("IPv4 default route", nl.AddDefaultRoute(Interface, c.IPv4Gateway))
		}
	}
	if c.IPv6 != nil {
		fail(Interface+" IPv6 address", nl.AddAddress(Interface, c.IPv6, 128))
		if c.IPv6Router != nil {
			fail("IPv6 default route", nl.AddDefaultRoute(Interface, c.IPv6Router))
		}
	}
	return joined(errs)
}

func joined(errs []string) error {
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "; "))
}

// AckTimeout bounds the wait for each request's acknowledgement.
const AckTimeout = 5 * time.Second

// Netlink is an open NETLINK_ROUTE socket that sends one request at a time
// and waits for its acknowledgement. Not safe for concurrent use.
type Netlink struct {
	fd  int
	seq uint32
}

// Open opens a NETLINK_ROUTE socket (close it with Close).
func Open() (*Netlink, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	// The kernel always answers; the bound is so PID 1 can never block on a receive forever.
	tv := syscall.NsecToTimeval(int64(AckTimeout))
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("netlink receive timeout: %w", err)
	}
	return &Netlink{fd: fd}, nil
}

// Close closes the socket.
func (n *Netlink) Close() error { return syscall.Close(n.fd) }

// LinkUp sets IFF_UP on the named interface (RTM_NEWLINK).
func (n *Netlink) LinkUp(name string) error {
	idx, err := ifindex(name)
	if err != nil {
		return err
	}
	msg := make([]byte, syscall.SizeofIfInfomsg)
	info := (*syscall.IfInfomsg)(unsafe.Pointer(&msg[0]))
	info.Family = syscall.AF_UNSPEC
	info.Index = int32(idx)
	info.Flags = syscall.IFF_UP
	info.Change = syscall.IFF_UP
	return n.request(syscall.RTM_NEWLINK, 0, msg)
}

// AddAddress adds ip/prefixLen to the named interface (RTM_NEWADDR, scope
// universe; IPv6 without duplicate address detection). The same address and
// prefix already there is not an error (EEXIST); the same address with
// another prefix is added beside it, as `ip addr add` does.
func (n *Netlink) AddAddress(name string, ip net.IP, prefixLen int) error {
	idx, err := ifindex(name)
	if err != nil {
		return err
	}
	family, raw := familyOf(ip)
	msg := make([]byte, syscall.SizeofIfAddrmsg)
	a := (*syscall.IfAddrmsg)(unsafe.Pointer(&msg[0]))
	a.Family = family
	a.Prefixlen = uint8(prefixLen)
	a.Scope = syscall.RT_SCOPE_UNIVERSE
	a.Index = uint32(idx)
	if family == syscall.AF_INET6 {
		a.Flags = ifaFNodad
	}
	msg = attr(msg, syscall.IFA_LOCAL, raw)
	msg = attr(msg, syscall.IFA_ADDRESS, raw)
	err = n.request(syscall.RTM_NEWADDR, syscall.NLM_F_CREATE|syscall.NLM_F_EXCL, msg)
	if errors.Is(err, syscall.EEXIST) {
		return nil
	}
	return err
}

// Delete removes, from eth0, the neighbour entry of ip (neighbour true:
// RTM_DELNEIGH, ARP or neighbour discovery, so the next packet resolves its
// link-layer address afresh) or the address ip/prefixLen (RTM_DELADDR). One
// that is not there is not an error (ENOENT, EADDRNOTAVAIL).
func (n *Netlink) Delete(neighbor bool, ip net.IP, prefixLen int) error {
	idx, err := ifindex(Interface)
	if err != nil {
		return err
	}
	family, raw := familyOf(ip)
	var msg []byte
	typ := uint16(syscall.RTM_DELADDR)
	if neighbor {
		// struct ndmsg (linux/neighbour.h): family, 3 pad bytes, ifindex, state, flags, type; NDA_DST is 1.
		msg = make([]byte, 12)
		msg[0] = family
		*(*int32)(unsafe.Pointer(&msg[4])) = int32(idx)
		msg = attr(msg, 1, raw)
		typ = syscall.RTM_DELNEIGH
	} else {
		msg = make([]byte, syscall.SizeofIfAddrmsg)
		a := (*syscall.IfAddrmsg)(unsafe.Pointer(&msg[0]))
		a.Family, a.Prefixlen, a.Index = family, uint8(prefixLen), uint32(idx)
		msg = attr(msg, syscall.IFA_LOCAL, raw)
		msg = attr(msg, syscall.IFA_ADDRESS, raw)
	}
	err = n.request(typ, 0, msg)
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EADDRNOTAVAIL) {
		return nil
	}
	return err
}

// AddDefaultRoute sets the main table's default route of gw's family to gw
// through the named interface (RTM_NEWROUTE, replacing one that is there).
func (n *Netlink) AddDefaultRoute(name string, gw net.IP) error {
	idx, err := ifindex(name)
	if err != nil {
		return err
	}
	family, raw := familyOf(gw)
	msg := make([]byte, syscall.SizeofRtMsg)
	r := (*syscall.RtMsg)(unsafe.Pointer(&msg[0]))
	r.Family = family
	r.Table = syscall.RT_TABLE_MAIN
	r.Protocol = syscall.RTPROT_BOOT
	r.Scope = syscall.RT_SCOPE_UNIVERSE
	r.Type = syscall.RTN_UNICAST
	msg = attr(msg, syscall.RTA_GATEWAY, raw)
	oif := make([]byte, 4)
	*(*uint32)(unsafe.Pointer(&oif[0])) = uint32(idx)
	msg = attr(msg, syscall.RTA_OIF, oif)
	return n.request(syscall.RTM_NEWROUTE, syscall.NLM_F_CREATE|syscall.NLM_F_REPLACE, msg)
}

// ifaFNodad is IFA_F_NODAD (linux/if_addr.h): no duplicate address detection for this address.
const ifaFNodad = 0x02

// ifindex is the named interface's index, by ioctl(SIOCGIFINDEX) on a datagram
// socket (net.InterfaceByName dumps every link and address over netlink: some
// 40 ms of cold code under TCG, where this is one system call).
func ifindex(name string) (int, error) {
	if len(name) >= syscall.IFNAMSIZ {
		return 0, fmt.Errorf("interface name %q is too long", name)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(fd)
	var req struct {
		name  [syscall.IFNAMSIZ]byte
		index int32
		_     [20]byte // the rest of struct ifreq's union
	}
	copy(req.name[:], name)
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFINDEX, uintptr(unsafe.Pointer(&req))); e != 0 {
		return 0, fmt.Errorf("no interface %s: %w", name, e)
	}
	return int(req.index), nil
}

func familyOf(ip net.IP) (uint8, []byte) {
	if v4 := ip.To4(); v4 != nil {
		return syscall.AF_INET, v4
	}
	return syscall.AF_INET6, ip.To16()
}

// attr appends one route attribute (struct rtattr, 4-byte aligned) to msg.
func attr(msg []byte, typ uint16, data []byte) []byte {
	l := syscall.SizeofRtAttr + len(data)
	b := make([]byte, rtaAlign(l))
	h := (*syscall.RtAttr)(unsafe.Pointer(&b[0]))
	h.Len = uint16(l)
	h.Type = typ
	copy(b[syscall.SizeofRtAttr:], data)
	return append(msg, b...)
}

func rtaAlign(l int) int { return (l + syscall.RTA_ALIGNTO - 1) &^ (syscall.RTA_ALIGNTO - 1) }

// request sends one message with NLM_F_REQUEST|NLM_F_ACK|flags and waits for
// its acknowledgement; a negative error in it becomes that errno.
func (n *Netlink) request(typ uint16, flags uint16, body []byte) error {
	n.seq++
	b := make([]byte, syscall.SizeofNlMsghdr+len(body))
	h := (*syscall.NlMsghdr)(unsafe.Pointer(&b[0]))
	h.Len = uint32(len(b))
	h.Type = typ
	h.Flags = syscall.NLM_F_REQUEST | syscall.NLM_F_ACK | flags
	h.Seq = n.seq
	copy(b[syscall.SizeofNlMsghdr:], body)
	if err := syscall.Sendto(n.fd, b, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 8192)
	for {
		m, _, err := syscall.Recvfrom(n.fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:m])
		if err != nil {
			return err
		}
		for _, msg := range msgs {
			if msg.Header.Seq != n.seq || msg.Header.Type != syscall.NLMSG_ERROR {
				continue
			}
			if len(msg.Data) < 4 {
				return errors.New("short netlink acknowledgement")
			}
			if code := *(*int32)(unsafe.Pointer(&msg.Data[0])); code != 0 {
				return syscall.Errno(-code)
			}
			return nil
		}
	}
}

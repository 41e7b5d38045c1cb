package restore

import (
	"fmt"
	"net"
	"strconv"

	"beachball/guest/internal/netconf"
	"beachball/guest/internal/wire"
)

// IPv6Router is the guest's IPv6 router, the link-local address the host puts on the placement's TAP
// (src/protocol/guest.ts GUEST_IPV6_ROUTER).
var IPv6Router = net.ParseIP("fe80::1")

// Network is a restored VM's network on its new placement, checked: the
// inputs of the kernel arguments beachball.ipv4, beachball.gateway and
// beachball.ipv6, in the type the boot code applies (netconf.Config), the
// IPv6 router set to IPv6Router when there is an IPv6 address. A nil field
// leaves that part of eth0 as it was; DNS is never set by a restore.
type Network = netconf.Config

// NetConfigurer applies a Network to eth0: netconf.Live in a VM (it moves a
// fork off its parent's address and neighbour entries), none in test mode.
// Apply returns an error for people when a step failed; the guest reports it
// on the console.
type NetConfigurer interface {
	Apply(n Network) error
}

// parseNetwork checks the network object: an IPv4 address with a prefix length 1..32, a
// gateway (only with the address) inside that prefix and not the address itself, and a
// canonical global unicast (2000::/3) or unique-local (fc00::/7) IPv6 address
// (src/agent/isolation/guestIpv6.ts isGuestIpv6Address). Every text must be canonical.
func parseNetwork(w wire.RestoredNetwork) (Network, error) {
	var n Network
	if w.IPv4CIDR != "" {
		ip, p, err := net.ParseCIDR(w.IPv4CIDR)
		ones, bits := 0, 0
		if err == nil {
			ones, bits = p.Mask.Size()
		}
		if err != nil || ip.To4() == nil || bits != 32 || ones < 1 || ip.String()+"/"+strconv.Itoa(ones) != w.IPv4CIDR {
			return n, fmt.Errorf("/network/ipv4Cidr is not an IPv4 address with a prefix length 1..32")
		}
		n.IPv4 = &net.IPNet{IP: ip.To4(), Mask: p.Mask}
	}
	if w.IPv4Gateway != "" {
		g := net.ParseIP(w.IPv4Gateway)
		switch {
		case n.IPv4 == nil:
			return n, fmt.Errorf("/network/ipv4Gateway needs /network/ipv4Cidr")
		case g.To4() == nil || g.String() != w.IPv4Gateway:
			return n, fmt.Errorf("/network/ipv4Gateway is not an IPv4 address")
		case !n.IPv4.Contains(g) || g.Equal(n.IPv4.IP):
			return n, fmt.Errorf("/network/ipv4Gateway is not another address of /network/ipv4Cidr")
		}
		n.IPv4Gateway = g.To4()
	}
	if w.IPv6Address != "" {
		a := net.ParseIP(w.IPv6Address)
		if a == nil || a.To4() != nil || a.String() != w.IPv6Address {
			return n, fmt.Errorf("/network/ipv6Address is not a canonical IPv6 address")
		}
		if a[0]&0xe0 != 0x20 && a[0]&0xfe != 0xfc {
			return n, fmt.Errorf("/network/ipv6Address is neither global unicast nor unique local")
		}
		n.IPv6 = a
		n.IPv6Router = IPv6Router
	}
	return n, nil
}

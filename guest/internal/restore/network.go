package restore

import (
	"fmt"
	"net/netip"

	"beachball/guest/internal/wire"
)

// IPv6Router is the guest's IPv6 router, the link-local address the host puts on the placement's TAP
// (src/protocol/guest.ts GUEST_IPV6_ROUTER).
var IPv6Router = netip.MustParseAddr("fe80::1")

// Network is a restored VM's network on its new placement, checked: the
// inputs of the kernel arguments beachball.ipv4, beachball.gateway and
// beachball.ipv6 (src/image/guestNetInit.ts, guestIpv6Init.ts). A zero
// field leaves that part of eth0 as it was.
type Network struct {
	// IPv4 is eth0's address and prefix (beachball.ipv4).
	IPv4 netip.Prefix
	// IPv4Gateway is the default route's gateway, inside IPv4's prefix (beachball.gateway).
	IPv4Gateway netip.Addr
	// IPv6 is eth0's address, configured as a /128 with `default via IPv6Router dev eth0` (beachball.ipv6).
	IPv6 netip.Addr
}

// NetConfigurer applies a Network to eth0 (the rtnetlink code of
// guest/internal/netconf once the lead wires it in). Apply returns an error
// for people when a step failed; the guest reports it on the console.
type NetConfigurer interface {
	Apply(n Network) error
}

// parseNetwork checks the network object: an IPv4 address with a prefix length 1..32, a
// gateway (only with the address) inside that prefix and not the address itself, and a
// canonical global unicast (2000::/3) or unique-local (fc00::/7) IPv6 address
// (src/agent/isolation/guestIpv6.ts isGuestIpv6Address).
func parseNetwork(w wire.RestoredNetwork) (Network, error) {
	var n Network
	if w.IPv4CIDR != "" {
		p, err := netip.ParsePrefix(w.IPv4CIDR)
		if err != nil || !p.Addr().Is4() || p.Bits() < 1 || p.String() != w.IPv4CIDR {
			return n, fmt.Errorf("/network/ipv4Cidr is not an IPv4 address with a prefix length 1..32")
		}
		n.IPv4 = p
	}
	if w.IPv4Gateway != "" {
		g, err := netip.ParseAddr(w.IPv4Gateway)
		switch {
		case !n.IPv4.IsValid():
			return n, fmt.Errorf("/network/ipv4Gateway needs /network/ipv4Cidr")
		case err != nil || !g.Is4() || g.String() != w.IPv4Gateway:
			return n, fmt.Errorf("/network/ipv4Gateway is not an IPv4 address")
		case !n.IPv4.Contains(g) || g == n.IPv4.Addr():
			return n, fmt.Errorf("/network/ipv4Gateway is not another address of /network/ipv4Cidr")
		}
		n.IPv4Gateway = g
	}
	if w.IPv6Address != "" {
		a, err := netip.ParseAddr(w.IPv6Address)
		if err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" || a.String() != w.IPv6Address {
			return n, fmt.Errorf("/network/ipv6Address is not a canonical IPv6 address")
		}
		if b := a.As16(); b[0]&0xe0 != 0x20 && b[0]&0xfe != 0xfc {
			return n, fmt.Errorf("/network/ipv6Address is neither global unicast nor unique local")
		}
		n.IPv6 = a
	}
	return n, nil
}

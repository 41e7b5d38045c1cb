package netconf

import (
	"net"
	"sync"
)

// Live is eth0's network as this guest runs it (first the boot's, from the
// kernel command line), and the restore side's network configurer
// (guest/internal/restore NetConfigurer): a VM restored from another
// placement's snapshot (a fork; issue 21) wakes with that placement's
// address and its neighbour entries for the old TAP, and Apply moves it onto
// the new placement. Safe for concurrent use.
type Live struct {
	mu  sync.Mutex
	cur Config
}

// NewLive starts from boot, the configuration the boot applied.
func NewLive(boot Config) *Live { return &Live{cur: boot} }

// Current is the configuration as last applied.
func (l *Live) Current() Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

// Apply moves eth0 to n, field by field (a nil field of n keeps the current
// one): it forgets the neighbour entries of the current IPv4 gateway and
// IPv6 router (a restored VM's are for the MAC of a TAP that may no longer be
// its own; the next packet either way learns the new one), removes an
// address that changes, then applies the result as the boot does (Apply:
// addresses, default routes again; the kernel drops an IPv4 route with the
// address it went through). An address that does not change is left alone,
// so a resume on its own placement keeps its connections. Every step is
// tried; the error joins those that failed.
func (l *Live) Apply(n Config) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := l.cur
	if n.IPv4 != nil {
		next.IPv4 = n.IPv4
	}
	if n.IPv4Gateway != nil {
		next.IPv4Gateway = n.IPv4Gateway
	}
	if n.IPv6 != nil {
		next.IPv6 = n.IPv6
	}
	if n.IPv6Router != nil {
		next.IPv6Router = n.IPv6Router
	}
	nl, err := Open()
	if err != nil {
		return err
	}
	var errs []string
	for _, gw := range []net.IP{l.cur.IPv4Gateway, l.cur.IPv6Router} {
		if gw != nil {
			errs = addErr(errs, "forget the neighbour "+gw.String(), nl.Delete(true, gw, 0))
		}
	}
	if old := l.cur.IPv4; old != nil && next.IPv4.String() != old.String() {
		ones, _ := old.Mask.Size()
		errs = addErr(errs, "remove the old IPv4 address", nl.Delete(false, old.IP, ones))
	}
	if old := l.cur.IPv6; old != nil && !old.Equal(next.IPv6) {
		errs = addErr(errs, "remove the old IPv6 address", nl.Delete(false, old, 128))
	}
	nl.Close()
	errs = addErr(errs, "apply", Apply(next))
	l.cur = next
	return joined(errs)
}

func addErr(errs []string, step string, err error) []string {
	if err != nil {
		errs = append(errs, step+": "+err.Error())
	}
	return errs
}

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/test/istiod"
	"github.com/galleon-mesh/galleon/test/sidecar"
)

// meshRoute is what a sidecar must make of one served host (docs/vips.md): DNS capture (NDS)
// answers exactly one address for it, a connection to that address on port goes to the host's
// own cluster outbound|port||host, whose endpoints are endpoints, and (TCP) a connection to one
// of those endpoints' IPs on port never lands in another listed host's cluster.
type meshRoute struct {
	host string
	port uint32
	// http: the port's protocol is routed by Host (HTTP, HTTP2, GRPC): the check sends an
	// HTTP/1.1 request with Host host. Otherwise a plain TCP connection.
	http      bool
	endpoints []string // "ip:port", sorted
	// address is the address NDS must answer, and the one dialled: an address the registry gave.
	// "" means any address Galleon allocated: one in vipRange outside istiod's own prefix.
	address string
}

func (r meshRoute) cluster() string { return fmt.Sprintf("outbound|%d||%s", r.port, r.host) }

var (
	vipRange       = netip.MustParsePrefix("240.0.0.0/4")    // --vip-ranges' default
	istiodVIPRange = netip.MustParsePrefix("240.240.0.0/16") // --vip-exclude's: istiod's own
)

// routeMismatches checks routes in v and returns every mismatch, the address NDS answers for
// each host (when it answers one) and, for the log, what each connection was found to do.
func routeMismatches(v *sidecar.View, routes []meshRoute) (wrong []string, addrs map[string]string, seen []string) {
	addrs = map[string]string{}
	owner := map[string]string{}    // address -> host
	clusters := map[string]string{} // cluster -> host
	for _, r := range routes {
		clusters[r.cluster()] = r.host
	}
	for _, r := range routes {
		ips := v.Resolve(r.host)
		ip := r.address
		switch {
		case len(ips) != 1:
			wrong = append(wrong, fmt.Sprintf("NDS resolves %s to %v, want one address", r.host, ips))
		case r.address != "" && ips[0] != r.address:
			wrong = append(wrong, fmt.Sprintf("NDS resolves %s to %v, want [%s]", r.host, ips, r.address))
		case r.address == "":
			ip = ips[0]
			if a, err := netip.ParseAddr(ip); err != nil || !vipRange.Contains(a) || istiodVIPRange.Contains(a) {
				wrong = append(wrong, fmt.Sprintf("%s has the address %s, want one from %s outside istiod's %s", r.host, ip, vipRange, istiodVIPRange))
			}
		}
		if len(ips) == 1 {
			addrs[r.host] = ips[0]
			if other, dup := owner[ips[0]]; dup && other != r.host { // a host listed once per port
				wrong = append(wrong, fmt.Sprintf("%s and %s share the address %s", other, r.host, ips[0]))
			}
			owner[ips[0]] = r.host
		}
		if ip == "" {
			continue // nothing to connect to
		}
		connect := func(ip string) (sidecar.Destination, string, error) {
			if r.http {
				d, err := v.HTTP(ip, r.port, r.host)
				return d, fmt.Sprintf("HTTP to %s:%d Host %s", ip, r.port, r.host), err
			}
			d, err := v.Dial(ip, r.port)
			return d, fmt.Sprintf("TCP to %s:%d", ip, r.port), err
		}
		d, what, err := connect(ip)
		switch {
		case err != nil:
			wrong = append(wrong, fmt.Sprintf("%s (%s): %v", what, r.host, err))
			continue
		case d.Cluster != r.cluster():
			wrong = append(wrong, fmt.Sprintf("%s (%s) goes to %s, want cluster %s", what, r.host, d, r.cluster()))
			continue
		}
		seen = append(seen, fmt.Sprintf("%s: %s", what, d))
		if eps, err := v.Endpoints(d.Cluster); err != nil || !slices.Equal(eps, r.endpoints) {
			wrong = append(wrong, fmt.Sprintf("cluster %s endpoints %v (%v), want %v", d.Cluster, eps, err, r.endpoints))
		}
		if r.http {
			continue // HTTP is told apart by Host wherever it goes
		}
		for _, ep := range r.endpoints {
			host, port, err := net.SplitHostPort(ep)
			if err != nil {
				wrong = append(wrong, fmt.Sprintf("%s: endpoint %q: %v", r.host, ep, err))
				continue
			}
			if p, _ := strconv.Atoi(port); uint32(p) != r.port {
				continue // a target port of its own: not reached through the service's port
			}
			d, what, err := connect(host)
			switch {
			case err != nil:
				wrong = append(wrong, fmt.Sprintf("%s (an endpoint of %s): %v", what, r.host, err))
			case clusters[d.Cluster] != "" && d.Cluster != r.cluster():
				wrong = append(wrong, fmt.Sprintf("%s (an endpoint of %s) goes to %s, another service's cluster", what, r.host, d))
			default:
				seen = append(seen, fmt.Sprintf("%s (an endpoint of %s): %s", what, r.host, d))
			}
		}
	}
	return wrong, addrs, seen
}

// expectRoutes fetches the sidecar's view from istiod until routeMismatches finds nothing (for
// at most 30 s), reports every mismatch of the last view otherwise, and returns the view and
// the address NDS answers for each host.
func expectRoutes(t *testing.T, ctx context.Context, ist *istiod.Istiod, what string, routes []meshRoute) (*sidecar.View, map[string]string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var (
		v           *sidecar.View
		wrong, seen []string
		addrs       map[string]string
	)
	start := time.Now()
	err := ist.WaitFor(wctx, func() (bool, error) {
		fctx, cancel := context.WithTimeout(wctx, 20*time.Second)
		defer cancel()
		got, err := sidecar.Fetch(fctx, ist.GRPCAddr, sidecarPod())
		if err != nil {
			return false, err
		}
		v = got
		wrong, addrs, seen = routeMismatches(v, routes)
		return len(wrong) == 0, nil
	})
	if v == nil {
		t.Fatalf("sidecar view, %s: %v", what, err)
	}
	if err != nil {
		for _, w := range wrong {
			t.Errorf("sidecar view, %s: %s", what, w)
		}
		t.Errorf("sidecar view, %s: still wrong after %v (listeners %v)", what, time.Since(start).Round(time.Millisecond), sidecar.Names(v.Listeners))
		return v, addrs
	}
	t.Logf("sidecar view, %s: after %v: NDS %v\n\t%s", what, time.Since(start).Round(time.Millisecond), addrs, strings.Join(seen, "\n\t"))
	return v, addrs
}

// withAddresses returns routes with each host's address set from addrs (as expectRoutes
// returned them): a later check then also proves the hosts kept their addresses.
func withAddresses(routes []meshRoute, addrs map[string]string) []meshRoute {
	out := slices.Clone(routes)
	for i := range out {
		if a, ok := addrs[out[i].host]; ok {
			out[i].address = a
		}
	}
	return out
}

// portEndpoints are "ip:port" of each ip, sorted.
func portEndpoints(port uint32, ips ...string) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, net.JoinHostPort(ip, strconv.Itoa(int(port))))
	}
	slices.Sort(out)
	return out
}

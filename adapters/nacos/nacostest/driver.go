package nacostest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/polarisserver"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// Driver is the conformance kit's registrytest.Driver for Nacos (also a Corrupter, and a Breaker
// and a Staller through two registrytest.Proxy, one before the Nacos HTTP port and one before
// its gRPC port). It writes each service of the kit as the instances of the Nacos service of the
// same name in Namespace and Group (default: public, DEFAULT_GROUP) over the Nacos HTTP v1 API,
// one registration per instance: its address as ip, the service's first port, its labels as
// metadata (plus the adapter's protocol key for a port that is not HTTP), unhealthy as
// healthy=false, and Draining as weight 0 (Nacos's other way to drain, enabled=false, hides the
// instance from every reader of Polaris: it lists no disabled instance).
//
// Run it against a server started with Options.NoHealthCheck: with Polaris's health checks on,
// an instance's health follows its heartbeats (see Options.NoHealthCheck), not what the kit puts.
type Driver struct {
	// HTTP and GRPC are the proxies before the server's ports (Proxies): the adapter is given
	// HTTP as its server. Break, Stall and Restore act on both.
	HTTP, GRPC *registrytest.Proxy
	// Namespace and Group are where the kit's services are written; set them before the kit runs.
	Namespace, Group string

	c *Client

	mu   sync.Mutex
	regs map[string][]Instance // service name -> its instances written (the corrupt one too)
}

var (
	_ registrytest.Driver    = (*Driver)(nil)
	_ registrytest.Corrupter = (*Driver)(nil)
	_ registrytest.Breaker   = (*Driver)(nil)
	_ registrytest.Staller   = (*Driver)(nil)

	_ registrytest.EventLoser = (*Driver)(nil)
)

// NewDriver returns a driver that writes to s (with s.Client()) and breaks it with proxies to its
// two ports (Proxies), which stop when t ends.
func NewDriver(t testing.TB, s *Server) *Driver {
	t.Helper()
	if !s.noHealthCheck {
		t.Fatal("nacostest: NewDriver wants a server started with Options.NoHealthCheck: with Polaris's health checks on, an instance's health follows heartbeats, not what the kit puts")
	}
	h, g := Proxies(t, s)
	return &Driver{HTTP: h, GRPC: g, c: s.Client(), regs: map[string][]Instance{}}
}

// Proxies starts a registrytest.Proxy to each of s's ports, the gRPC one at the HTTP one's port
// + 1000, where a Nacos client looks for it: the adapter is given the HTTP proxy as its server
// and keeps its default gRPC port offset. They stop when t ends.
func Proxies(t testing.TB, s *Server) (httpProxy, grpcProxy *registrytest.Proxy) {
	t.Helper()
	var errs []error
	for range 20 {
		h := registrytest.NewProxy(t, s.HTTPAddr)
		p := port(h.Addr())
		if p+polarisserver.NacosGRPCOffset > 65535 {
			continue
		}
		g, err := registrytest.ListenProxy(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(p+polarisserver.NacosGRPCOffset)), s.GRPCAddr)
		if err == nil {
			return h, g
		}
		errs = append(errs, err)
	}
	t.Fatalf("nacostest: no free pair of ports P, P+1000 for the proxies: %v", errors.Join(errs...))
	return nil, nil
}

// GRPCPortOffset is the adapter's gRPC port offset through the proxies: port(GRPC) - port(HTTP),
// Nacos's default 1000.
func (d *Driver) GRPCPortOffset() int { return port(d.GRPC.Addr()) - port(d.HTTP.Addr()) }

func port(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// Break cuts both ports until Restore.
func (d *Driver) Break(ctx context.Context) error {
	return errors.Join(d.HTTP.Break(ctx), d.GRPC.Break(ctx))
}

// Stall makes both ports accept and never answer until Restore.
func (d *Driver) Stall(ctx context.Context) error {
	return errors.Join(d.HTTP.Silence(ctx), d.GRPC.Silence(ctx))
}

// Restore ends a Break or a Stall.
func (d *Driver) Restore(ctx context.Context) error {
	return errors.Join(d.HTTP.Restore(ctx), d.GRPC.Restore(ctx))
}

// LoseEvents makes the adapter miss the pushes of change: it cuts the adapter's connections
// and refuses new ones while change writes to the server (directly, not through the proxies),
// then lets the adapter connect again. A Nacos server keeps no history a watch could resume
// from: what a client missed while disconnected it learns only by subscribing again (and listing
// the services again), which is what the kit checks. The adapter may report the gap as an
// outage meanwhile.
func (d *Driver) LoseEvents(ctx context.Context, change func(ctx context.Context) error) error {
	if err := d.Break(ctx); err != nil {
		return err
	}
	err := change(ctx)
	return errors.Join(err, d.Restore(ctx))
}

func (d *Driver) ref(name string) Ref {
	return Ref{Namespace: d.Namespace, Group: d.Group, Service: name}
}

// instanceOf is the Nacos instance of a kit instance of svc.
func instanceOf(svc model.Service, inst model.Instance) Instance {
	in := NewInstance(inst.Address, int(svc.Ports[0].Number))
	in.Healthy = inst.Health != model.Unhealthy
	if inst.Health == model.Draining {
		in.Weight = 0
	}
	in.Metadata = maps.Clone(inst.Labels)
	if p := svc.Ports[0].Protocol; p != "" && p != model.ProtocolHTTP {
		if in.Metadata == nil {
			in.Metadata = map[string]string{}
		}
		in.Metadata["protocol"] = strings.ToLower(string(p))
	}
	return in
}

func addrOf(in Instance) string { return net.JoinHostPort(in.IP, strconv.Itoa(in.Port)) }

// Put writes svc's instances, removes the ones (and any corrupt record) it no longer holds, then
// waits until a fresh listing holds exactly them.
func (d *Driver) Put(ctx context.Context, svc model.Service) error {
	if len(svc.Ports) == 0 {
		return errors.New("nacostest: a Nacos service of the kit needs a port")
	}
	ref := d.ref(svc.Name)
	want := map[string]Instance{}
	var ins []Instance
	for _, inst := range svc.Instances {
		in := instanceOf(svc, inst)
		if err := d.c.RegisterInstance(ctx, ref, in); err != nil {
			return err
		}
		want[addrOf(in)] = in
		ins = append(ins, in)
	}
	if err := d.removeExcept(ctx, svc.Name, want); err != nil {
		return err
	}
	d.mu.Lock()
	d.regs[svc.Name] = ins
	d.mu.Unlock()
	return d.wait(ctx, ref, want)
}

// Remove deregisters every instance of the service (the corrupt one too), waits until none is
// listed, and deletes the service: the kit's Remove is the service gone, and galleon-nacos
// keeps the ServiceEntry of a service still listed after its last instance left (with no
// endpoints), as galleon-zookeeper does.
func (d *Driver) Remove(ctx context.Context, key model.ServiceKey) error {
	if err := d.removeExcept(ctx, key.Name, nil); err != nil {
		return err
	}
	d.mu.Lock()
	delete(d.regs, key.Name)
	d.mu.Unlock()
	ref := d.ref(key.Name)
	if err := d.wait(ctx, ref, nil); err != nil {
		return err
	}
	// Polaris refuses to delete a service while its store still holds an instance: the
	// deregistrations may not have reached it yet.
	for {
		err := d.c.DeleteService(ctx, ref)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("deleting %s: %w (last: %v)", ref.Grouped(), ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CorruptIP is the ip of the instance Corrupt registers: no IP address and no host name (Polaris
// takes any string).
const CorruptIP = "not_an_ip"

// Corrupt registers, in the service of key's name, an instance whose ip is no address, and
// returns its record name as the adapter names it: "<namespace>/<group>/<service> <ip>:<port>".
func (d *Driver) Corrupt(ctx context.Context, key model.ServiceKey) (string, error) {
	ref := d.ref(key.Name)
	in := NewInstance(CorruptIP, 8080)
	if err := d.c.RegisterInstance(ctx, ref, in); err != nil {
		return "", err
	}
	d.mu.Lock()
	d.regs[key.Name] = append(d.regs[key.Name], in)
	d.mu.Unlock()
	if _, err := d.c.WaitInstances(ctx, ref, func(si *ServiceInfo) bool { return si.Find(in.IP, in.Port) != nil }); err != nil {
		return "", err
	}
	return ref.namespace() + "/" + ref.group() + "/" + ref.Service + " " + addrOf(in), nil
}

// removeExcept deregisters the instances of name written before that want does not hold.
func (d *Driver) removeExcept(ctx context.Context, name string, want map[string]Instance) error {
	d.mu.Lock()
	old := d.regs[name]
	d.mu.Unlock()
	for _, in := range old {
		if _, ok := want[addrOf(in)]; !ok {
			if err := d.c.DeregisterInstance(ctx, d.ref(name), in); err != nil {
				return err
			}
		}
	}
	return nil
}

// wait waits until a fresh listing of ref holds exactly want: addresses, health, weight and
// metadata (Polaris's own keys aside).
func (d *Driver) wait(ctx context.Context, ref Ref, want map[string]Instance) error {
	_, err := d.c.WaitInstances(ctx, ref, func(si *ServiceInfo) bool {
		if len(si.Hosts) != len(want) {
			return false
		}
		for _, h := range si.Hosts {
			w, ok := want[net.JoinHostPort(h.IP, strconv.Itoa(h.Port))]
			if !ok || h.Healthy != w.Healthy || h.Weight != float64(int(w.Weight)) || !sameMetadata(h.Metadata, w.Metadata) {
				return false
			}
		}
		return true
	})
	return err
}

// sameMetadata compares metadata but the internal-* keys Polaris adds.
func sameMetadata(got, want map[string]string) bool {
	n := 0
	for k, v := range got {
		if strings.HasPrefix(k, "internal-") {
			continue
		}
		if want[k] != v {
			return false
		}
		n++
	}
	return n == len(want)
}

// Normalize turns a service the kit puts into what the adapter reports with its default
// naming, for the kit's services in public and DEFAULT_GROUP (registrytest.WithNormalize): the
// host "<name>.default-group.public.nacos", no service labels (Nacos has none), the port
// unnamed, and each instance as the adapter names it (ip:port) with the weight it serves (1
// scaled to 100; Draining's 0).
func (d *Driver) Normalize(svc model.Service) model.Service {
	if d.Namespace != "" && d.Namespace != DefaultNamespace || d.Group != "" && d.Group != DefaultGroup {
		panic(fmt.Sprintf("nacostest: Driver.Normalize knows the hosts of public/DEFAULT_GROUP only, not %s/%s", d.Namespace, d.Group))
	}
	svc.Hosts = []string{svc.Name + ".default-group.public.nacos"}
	svc.Labels = nil
	ports := make([]model.Port, len(svc.Ports))
	copy(ports, svc.Ports)
	for i := range ports {
		ports[i].Name = ""
	}
	svc.Ports = ports
	insts := make([]model.Instance, len(svc.Instances))
	for i, inst := range svc.Instances {
		inst.ID = net.JoinHostPort(inst.Address, strconv.Itoa(int(svc.Ports[0].Number)))
		inst.Weight = 100
		if inst.Health == model.Draining {
			inst.Weight = 0
		}
		insts[i] = inst
	}
	svc.Instances = insts
	return svc
}

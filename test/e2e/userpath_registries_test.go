package e2e

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/galleon-mesh/galleon/adapters/consul/consultest"
	"github.com/galleon-mesh/galleon/adapters/eureka/eurekatest"
	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest/grpcwriter"
	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
	"github.com/galleon-mesh/galleon/internal/testing/testpki"
)

// userPathRegistry is a registry the user's path runs through: it writes the registry, names the
// adapter that serves it, and moves the target's moving instance.
type userPathRegistry interface {
	// setUp writes services generated services of userPathInstances instances each, plus the
	// target, and returns the adapter (its command's name) and its registry flags.
	setUp(tb testing.TB, ctx context.Context, services int) (bin string, args []string)
	// move puts the target's moving instance at filegen.MoverAddr(variant), as the registry's
	// users do: one write.
	move(ctx context.Context, variant int) error
	// cluster is the target's EDS cluster in a sidecar; port is its endpoints' port.
	cluster() string
	port() int
	// close stops the registry's server, if it has one (idempotent): a benchmark's next scale
	// should not share the machine with it.
	close()
}

// newUserPathRegistry is the registry BenchmarkUserPath and TestUserPathHarness run through by
// that name: file, peer (galleon-file's registry served by go-control-plane: peerUserPath),
// zookeeper, consul, consul-watches (galleon-consul with a watch per service), nacos or eureka.
func newUserPathRegistry(name string) (userPathRegistry, error) {
	switch name {
	case "file":
		return &fileUserPath{}, nil
	case "peer":
		return &peerUserPath{}, nil
	case "zookeeper":
		return &zkUserPath{}, nil
	case "consul":
		return &consulUserPath{}, nil
	case "consul-watches":
		return &consulUserPath{watches: true}, nil
	case "nacos":
		return &nacosUserPath{}, nil
	case "eureka":
		return &eurekaUserPath{}, nil
	}
	return nil, fmt.Errorf("no registry %q for the user's path: file, peer, zookeeper, consul, consul-watches, nacos or eureka", name)
}

// fileUserPath is a file registry (filegen) served by galleon-file; a change replaces the target's
// file atomically, the moving instance keeping its id.
type fileUserPath struct{ dir string }

func (f *fileUserPath) setUp(tb testing.TB, _ context.Context, services int) (string, []string) {
	tb.Helper()
	f.dir = tb.TempDir()
	if err := filegen.Generate(filegen.GenerateConfig{Dir: f.dir, Services: services, Instances: userPathInstances}); err != nil {
		tb.Fatal(err)
	}
	return "galleon-file", []string{"--file-dir", f.dir, "--file-scan-quiet", "1ms"}
}

func (f *fileUserPath) move(_ context.Context, variant int) error {
	return filegen.WriteTargetIn(f.dir, filegen.DefaultNamespace, userPathInstances, variant)
}

// cluster: galleon-file gives a service without hosts the host <name>.<namespace>.internal
// (docs/adapters/file.md).
func (f *fileUserPath) cluster() string {
	return "outbound|8080||load-target." + filegen.DefaultNamespace + ".internal"
}

func (f *fileUserPath) port() int { return 8080 }

func (f *fileUserPath) close() {}

// peerUserPath is fileUserPath's registry served by galleon-peer (the bench module's
// go-control-plane v0.14.0 peer: galleon-file's front end, go-control-plane's LinearCache and
// ADS server), so that istiod's side of a change is measured with that peer as the source in
// the same harness. It serves one source (no shards), and stamps the MCP resource type URL on
// every resource's Any, without which istiod decodes none of them (its --any-type-url).
type peerUserPath struct{ fileUserPath }

func (p *peerUserPath) setUp(tb testing.TB, ctx context.Context, services int) (string, []string) {
	tb.Helper()
	p.fileUserPath.setUp(tb, ctx, services)
	return "galleon-peer", []string{"--dir", p.dir, "--file-scan-quiet", "1ms",
		"--type", "networking.istio.io/v1/ServiceEntry", "--any-type-url", "type.googleapis.com/istio.mcp.v1alpha1.Resource"}
}

// zkUserPath is a ZooKeeper holding Dubbo 2 providers (the layout of TestZooKeeperToIstiod:
// dubboProviderOf), served by galleon-zookeeper --zk-layout dubbo. A change is what a provider
// that moves does to ZooKeeper, in one transaction: its old node deleted, its new one created.
type zkUserPath struct {
	srv  *zktest.Server
	conn *zk.Conn
	// moving is the node of the target's moving provider now.
	moving string
	// targetIndex is the target's filegen.InstanceAddr service index: after the generated ones.
	targetIndex int
}

const (
	zkUserPathTarget = "org.galleon.userpath.Target"
	// zkUserPathBatch is the providers' znodes created per ZooKeeper transaction, and
	// zkUserPathWriters the transactions in flight, as galleon-load zk-generate writes.
	zkUserPathBatch   = 480
	zkUserPathWriters = 8
)

func (z *zkUserPath) setUp(tb testing.TB, ctx context.Context, services int) (string, []string) {
	tb.Helper()
	// ZooKeeper holds every znode in its heap: ~7.5 KB of data per interface of 10 providers.
	srv := zktest.Start(tb, zktest.Options{HeapMiB: 256 + services/16})
	conn, _, err := zk.Connect([]string{srv.Addr()}, 10*time.Second, zk.WithLogger(zkQuietLogger{}))
	if err != nil {
		tb.Fatal(err)
	}
	z.srv, z.conn, z.targetIndex = srv, conn, services
	tb.Cleanup(z.close)
	start := time.Now()
	if err := z.write(ctx, services); err != nil {
		tb.Fatalf("writing %d interfaces x %d providers: %v", services, userPathInstances, err)
	}
	tb.Logf("ZooKeeper: %d interfaces x %d providers and the target written in %v", services, userPathInstances, time.Since(start).Round(time.Millisecond))
	return "galleon-zookeeper", []string{"--zk-servers", srv.Addr(), "--zk-layout", "dubbo"}
}

// write creates /dubbo, the generated interfaces with their providers, and the target.
func (z *zkUserPath) write(ctx context.Context, services int) error {
	acl := zk.WorldACL(zk.PermAll)
	if _, err := z.conn.Create("/dubbo", nil, 0, acl); err != nil {
		return err
	}
	var ops []any
	var batches [][]any
	iface := func(i int) string {
		if i == z.targetIndex {
			return zkUserPathTarget
		}
		return fmt.Sprintf("org.galleon.userpath.Service%05d", i)
	}
	for i := range services + 1 {
		name := iface(i)
		ops = append(ops, &zk.CreateRequest{Path: "/dubbo/" + name, Acl: acl}, &zk.CreateRequest{Path: "/dubbo/" + name + "/providers", Acl: acl})
		for j := range userPathInstances {
			ops = append(ops, &zk.CreateRequest{Path: z.providerPath(name, filegen.InstanceAddr(i, j)), Acl: acl})
		}
		if len(ops) >= zkUserPathBatch || i == services {
			batches, ops = append(batches, ops), nil
		}
	}
	z.moving = z.providerPath(zkUserPathTarget, filegen.InstanceAddr(z.targetIndex, 0))
	return inFlight(ctx, len(batches), zkUserPathWriters, func(i int) error {
		_, err := z.conn.Multi(batches[i]...)
		return err
	})
}

// inFlight calls fn(i) for every i in [0, n), at most workers at a time, as a registry's
// writers do; it stops starting calls at the first error or when ctx ends, and returns that.
func inFlight(ctx context.Context, n, workers int, fn func(i int) error) error {
	work := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range work {
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
feed:
	for i := range n {
		select {
		case work <- i:
		case err = <-errs:
			break feed
		case <-ctx.Done():
			err = ctx.Err()
			break feed
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	for e := range errs {
		err = cmp.Or(err, e)
	}
	return err
}

func (z *zkUserPath) providerPath(iface, ip string) string {
	return "/dubbo/" + iface + "/providers/" + dubboProviderOf(iface, "userpath", "get,list", ip)
}

func (z *zkUserPath) move(_ context.Context, variant int) error {
	next := z.providerPath(zkUserPathTarget, filegen.MoverAddr(variant))
	if _, err := z.conn.Multi(&zk.DeleteRequest{Path: z.moving, Version: -1}, &zk.CreateRequest{Path: next, Acl: zk.WorldACL(zk.PermAll)}); err != nil {
		return fmt.Errorf("moving the target's provider to %s: %w", filegen.MoverAddr(variant), err)
	}
	z.moving = next
	return nil
}

// cluster: galleon-zookeeper names a Dubbo service by its interface and version
// (dubboServiceName) in the namespace default, host <name>.default.dubbo, on the providers' port.
func (z *zkUserPath) cluster() string {
	return "outbound|" + strconv.Itoa(greetingPort) + "||" + dubboServiceName(zkUserPathTarget, greetingVersion) + ".default.dubbo"
}

func (z *zkUserPath) port() int { return greetingPort }

func (z *zkUserPath) close() {
	if z.conn != nil { // go-zookeeper's Close is not idempotent
		z.conn.Close()
		z.conn = nil
	}
	z.srv.Close()
}

// consulUserPath is a Consul agent's catalog (consultest.Register: /v1/txn) served by
// galleon-consul with its defaults or, with watches, with a blocking query per service
// (--consul-service-watches, over HTTP/2 on the agent's HTTPS listener, as docs/adapters/consul.md
// configures it). Each instance has a passing check; consulUserPathNode places it. A change is
// what a replaced instance does: its registration deleted and the new one's (a new ID, the next
// address, its check) set, in one transaction.
type consulUserPath struct {
	watches bool
	agent   *consultest.Agent
	// moving is the target's moving instance now.
	moving      consultest.Instance
	targetIndex int
}

const (
	consulUserPathTarget = "load-target"
	consulUserPathPort   = 8080
)

// consulUserPathNode is the node of instance j of service i: a node (a machine with its agent)
// hosts instance j of ten services. With every service's instance j on one node (10,000
// services a node), registering 10,000 services had not finished after 12 minutes; with ten a
// node it takes under two.
func consulUserPathNode(i, j int) string { return fmt.Sprintf("node-%04d-%d", i/10, j) }

// instance is instance j of generated service i (the target when i is
// targetIndex), with a passing check.
func (c *consulUserPath) instance(i, j int) consultest.Instance {
	name := fmt.Sprintf("svc-%05d", i)
	if i == c.targetIndex {
		name = consulUserPathTarget
	}
	return consultest.Instance{
		Node: consulUserPathNode(i, j), NodeAddress: filegen.InstanceAddr(i, j),
		ID: fmt.Sprintf("%s-%d", name, j), Service: name, Address: filegen.InstanceAddr(i, j), Port: consulUserPathPort,
		Check: "passing",
	}
}

func (c *consulUserPath) setUp(tb testing.TB, ctx context.Context, services int) (string, []string) {
	tb.Helper()
	var opts consultest.Options
	var pki testpki.Files
	if c.watches {
		var err error
		if pki, err = testpki.Write(tb.TempDir(), "galleon"); err != nil {
			tb.Fatal(err)
		}
		opts.HTTPSCert, opts.HTTPSKey = pki.ServerCert, pki.ServerKey
	}
	c.agent = consultest.Start(tb, opts)
	c.targetIndex = services
	var instances []consultest.Instance
	for i := range services + 1 {
		for j := range userPathInstances {
			instances = append(instances, c.instance(i, j))
		}
	}
	c.moving = c.instance(c.targetIndex, 0)
	start := time.Now()
	if err := consultest.Register(ctx, c.agent, instances); err != nil {
		tb.Fatalf("registering %d services x %d instances: %v", services, userPathInstances, err)
	}
	tb.Logf("Consul: %d services x %d instances and the target registered in %v", services, userPathInstances, time.Since(start).Round(time.Millisecond))
	if c.watches {
		return "galleon-consul", []string{"--consul-address", "https://" + c.agent.HTTPSAddr, "--consul-tls-ca", pki.CA,
			"--consul-tls-server-name", "localhost", "--consul-service-watches", strconv.Itoa(services + 1)}
	}
	return "galleon-consul", []string{"--consul-address", c.agent.HTTPAddr}
}

func (c *consulUserPath) move(ctx context.Context, variant int) error {
	next := c.moving
	next.ID = fmt.Sprintf("%s-moved-%d", consulUserPathTarget, variant)
	next.Address = filegen.MoverAddr(variant)
	if err := consultest.Replace(ctx, c.agent, c.moving, next); err != nil {
		return fmt.Errorf("replacing the target's instance %s by %s at %s: %w", c.moving.ID, next.ID, next.Address, err)
	}
	c.moving = next
	return nil
}

// cluster: galleon-consul's host is <service>.service.consul (docs/adapters/consul.md).
func (c *consulUserPath) cluster() string {
	return "outbound|" + strconv.Itoa(consulUserPathPort) + "||" + consulUserPathTarget + ".service.consul"
}

func (c *consulUserPath) port() int { return consulUserPathPort }

func (c *consulUserPath) close() { c.agent.Close() }

// nacosUserPath is a Nacos API server (polaris-server's service-nacos: nacostest) holding
// ephemeral instances registered over the Nacos 2 gRPC API, as a Nacos 2 client registers them
// (grpcwriter: bound to its connection, no heartbeat), in namespace public and DEFAULT_GROUP,
// served by galleon-nacos with its defaults. A change is what a moving instance does: Nacos
// keys an instance by its address, so its registration is removed and the new address
// registered, two requests.
type nacosUserPath struct {
	tb          testing.TB
	srv         *nacostest.Server
	w           *grpcwriter.Writer
	moving      nacostest.Instance
	targetIndex int
	closed      bool
}

const (
	nacosUserPathTarget = "load-target"
	nacosUserPathPort   = 8080
	// nacosUserPathWriters is how many registrations are in flight while the registry is
	// written (galleon-load nacos-generate's default).
	nacosUserPathWriters = 32
)

// ref is generated service i (the target when i is targetIndex).
func (n *nacosUserPath) ref(i int) nacostest.Ref {
	name := fmt.Sprintf("svc-%05d", i)
	if i == n.targetIndex {
		name = nacosUserPathTarget
	}
	return nacostest.Ref{Service: name}
}

func nacosUserPathInstance(addr string) nacostest.Instance {
	in := nacostest.NewInstance(addr, nacosUserPathPort)
	in.Ephemeral = true
	return in
}

func (n *nacosUserPath) setUp(tb testing.TB, ctx context.Context, services int) (string, []string) {
	tb.Helper()
	n.tb = tb
	n.srv = nacostest.Start(tb, nacostest.Options{})
	// A loaded Polaris takes seconds a registration: galleon-load's timeout.
	w, err := grpcwriter.Dial(ctx, grpcwriter.Config{Address: n.srv.GRPCAddr, Timeout: 30 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	n.w = w
	tb.Cleanup(func() { _ = w.Close() })
	n.targetIndex = services
	n.moving = nacosUserPathInstance(filegen.InstanceAddr(n.targetIndex, 0))
	start := time.Now()
	if err := inFlight(ctx, (services+1)*userPathInstances, nacosUserPathWriters, func(k int) error {
		i, j := k/userPathInstances, k%userPathInstances
		if err := n.w.Register(ctx, n.ref(i), nacosUserPathInstance(filegen.InstanceAddr(i, j))); err != nil {
			return fmt.Errorf("registering instance %d of %s: %w", j, n.ref(i).Service, err)
		}
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	// Polaris lists a registration a while after it answered it (seconds when it is loaded):
	// the target's last one listed stands for all, the harness then waits for the sidecar.
	if _, err := n.srv.Client().WaitInstances(ctx, n.ref(n.targetIndex), func(si *nacostest.ServiceInfo) bool {
		return len(si.Hosts) == userPathInstances
	}); err != nil {
		tb.Fatalf("Polaris does not list the target's %d instances: %v", userPathInstances, err)
	}
	tb.Logf("Nacos: %d services x %d instances and the target registered in %v", services, userPathInstances, time.Since(start).Round(time.Millisecond))
	return "galleon-nacos", []string{"--nacos-servers", n.srv.HTTPAddr}
}

func (n *nacosUserPath) move(ctx context.Context, variant int) error {
	next := nacosUserPathInstance(filegen.MoverAddr(variant))
	target := n.ref(n.targetIndex)
	if err := n.w.Deregister(ctx, target, n.moving); err != nil {
		return fmt.Errorf("deregistering the target's instance at %s: %w", n.moving.IP, err)
	}
	if err := n.w.Register(ctx, target, next); err != nil {
		return fmt.Errorf("registering the target's instance at %s: %w", next.IP, err)
	}
	n.moving = next
	return nil
}

// cluster: galleon-nacos's host is <service>.<group>.<namespace>.nacos, each a DNS label
// (docs/adapters/nacos.md).
func (n *nacosUserPath) cluster() string {
	return "outbound|" + strconv.Itoa(nacosUserPathPort) + "||" + nacosUserPathTarget + ".default-group." + nacostest.DefaultNamespace + ".nacos"
}

func (n *nacosUserPath) port() int { return nacosUserPathPort }

func (n *nacosUserPath) close() {
	if n.closed || n.srv == nil {
		return
	}
	n.closed = true
	_ = n.w.Close()
	n.srv.Kill(n.tb)
}

// eurekaUserPath is a Eureka API server (polaris-server's service-eureka: eurekatest) holding
// instances registered and renewed over Eureka's REST API, served by galleon-eureka with its
// defaults but a 1 s poll (--eureka-poll-interval; 10 s by default). A change is what a
// moving instance does: its registration cancelled and a new one, of a new instance ID,
// made (two requests).
//
// Renewals are what bounds the scale: Polaris drops an instance whose heartbeat it has not had
// for three TTLs, and caps the TTL at 60 s (min(lease/3, renewal interval):
// eurekatest.Instance), so every instance is registered with a 60 s renewal interval and
// renewed every eurekaUserPathRenew, from the start of the registration on: at 1,000 services
// a registry of 10,010 instances costs Polaris 220 renewals a second, all the time.
type eurekaUserPath struct {
	tb     testing.TB
	srv    *eurekatest.Server
	closed bool

	mu         sync.Mutex
	registered map[string][]string // instance IDs registered now, by application (upper case)
	moverID    string
}

const (
	eurekaUserPathTarget = "load-target"
	eurekaUserPathPort   = 8080
	// eurekaUserPathWriters is how many registrations are in flight while the registry is
	// written.
	eurekaUserPathWriters = 32
	// eurekaUserPathRenew is how often every instance is renewed: under Polaris's 60 s TTL,
	// with the time a round of renewals takes to spare.
	eurekaUserPathRenew = 45 * time.Second
)

// eurekaUserPathInstance is instance id of application app at addr, renewed every minute.
func eurekaUserPathInstance(app, id, addr string) eurekatest.Instance {
	return eurekatest.Instance{App: app, ID: id, IPAddr: addr, Port: eurekaUserPathPort, RenewalInterval: time.Minute}
}

func (e *eurekaUserPath) setUp(tb testing.TB, ctx context.Context, services int) (string, []string) {
	tb.Helper()
	e.tb = tb
	e.srv = eurekatest.Start(tb, eurekatest.Options{})
	e.registered = map[string][]string{}
	e.moverID = eurekaUserPathTarget + "-0"
	eurekatest.RenewEvery(tb, e.srv, eurekaUserPathRenew, e.renewals)
	start := time.Now()
	if err := inFlight(ctx, (services+1)*userPathInstances, eurekaUserPathWriters, func(k int) error {
		i, j := k/userPathInstances, k%userPathInstances
		app := fmt.Sprintf("svc-%05d", i)
		if i == services {
			app = eurekaUserPathTarget
		}
		in := eurekaUserPathInstance(app, fmt.Sprintf("%s-%d", app, j), filegen.InstanceAddr(i, j))
		if err := e.srv.Register(ctx, in); err != nil {
			return fmt.Errorf("registering %s: %w", in.ID, err)
		}
		e.mu.Lock()
		e.registered[strings.ToUpper(app)] = append(e.registered[strings.ToUpper(app)], in.ID)
		e.mu.Unlock()
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	// Polaris lists a registration a while after it answered it: the target's instances listed
	// stand for all, the harness then waits for the sidecar.
	if _, err := e.srv.WaitApps(ctx, "/apps", func(a *eurekatest.Applications) bool {
		return len(upIDs(a, eurekaUserPathTarget)) == userPathInstances
	}); err != nil {
		tb.Fatalf("Polaris does not list the target's %d instances: %v", userPathInstances, err)
	}
	tb.Logf("Eureka: %d applications x %d instances and the target registered in %v", services, userPathInstances, time.Since(start).Round(time.Millisecond))
	return "galleon-eureka", []string{"--eureka-urls", e.srv.BaseURL(), "--eureka-poll-interval", "1s"}
}

// renewals are the instances to renew now (eurekatest.RenewEvery; a failed renewal is
// Polaris's load, and the next round renews it well within the three TTLs).
func (e *eurekaUserPath) renewals() map[string][]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.registered)
}

func (e *eurekaUserPath) move(ctx context.Context, variant int) error {
	e.mu.Lock()
	old := e.moverID
	e.mu.Unlock()
	target := strings.ToUpper(eurekaUserPathTarget)
	next := eurekaUserPathInstance(eurekaUserPathTarget, fmt.Sprintf("%s-mover-%d", eurekaUserPathTarget, variant), filegen.MoverAddr(variant))
	if err := e.srv.Cancel(ctx, target, old); err != nil {
		return fmt.Errorf("cancelling the target's instance %s: %w", old, err)
	}
	if err := e.srv.Register(ctx, next); err != nil {
		return fmt.Errorf("registering the target's instance %s at %s: %w", next.ID, next.IPAddr, err)
	}
	e.mu.Lock()
	ids := slices.DeleteFunc(slices.Clone(e.registered[target]), func(id string) bool { return id == old })
	e.registered[target] = append(ids, next.ID)
	e.moverID = next.ID
	e.mu.Unlock()
	return nil
}

// cluster: galleon-eureka's host is <application, lower case>.eureka (docs/adapters/eureka.md).
func (e *eurekaUserPath) cluster() string {
	return "outbound|" + strconv.Itoa(eurekaUserPathPort) + "||" + eurekaUserPathTarget + ".eureka"
}

func (e *eurekaUserPath) port() int { return eurekaUserPathPort }

func (e *eurekaUserPath) close() {
	if e.closed || e.srv == nil {
		return
	}
	e.closed = true
	e.mu.Lock()
	clear(e.registered) // nothing left to renew until the test's cleanup stops the renewals
	e.mu.Unlock()
	e.srv.Kill(e.tb)
}

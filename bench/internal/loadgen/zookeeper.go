package loadgen

// ZooKeeper registries for load runs: ZKGenerate writes one in either layout
// the ZooKeeper adapter reads (adapters/zookeeper), and zkChanger makes the
// run's changes to its target service, as one ZooKeeper write each.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
)

// The layouts of a ZooKeeper registry, as the adapter's --zk-layout names them.
const (
	ZKLayoutDubbo   = "dubbo"
	ZKLayoutCurator = "curator"
)

// The target the run changes in a ZooKeeper registry: Dubbo interface
// TargetInterface (version 1.0.0) or Curator service TargetService.
const (
	TargetInterface = "org.galleon.load.Target"
	TargetService   = "load-target"
)

const (
	dubboPort   = 20880
	curatorPort = 8080
	// zkSessionWait bounds the wait for a first session: a server that is
	// not there should fail the command, not hang it.
	zkSessionWait = 15 * time.Second
	// A Multi is one transaction, one request and one log entry: big ones
	// cost fewer round trips and fsyncs, but a request must stay well under
	// the server's jute.maxbuffer (1 MiB by default).
	multiMaxOps   = 500
	multiMaxBytes = 512 << 10
	// maxInstances keeps the last octet of generated addresses (j+1) a
	// valid host number.
	maxInstances = 250
	// moverVariants is how many distinct addresses (10.251.a.b) the moving
	// instance takes in turn.
	moverVariants = 250*250 - 1
)

// zkRoot checks layout and returns root, or the adapter's default root for
// layout when root is empty.
func zkRoot(layout, root string) (string, error) {
	def := ""
	switch layout {
	case ZKLayoutDubbo:
		def = "/dubbo"
	case ZKLayoutCurator:
		def = "/services"
	default:
		return "", fmt.Errorf("layout %q: want %s or %s, the adapter's --zk-layout", layout, ZKLayoutDubbo, ZKLayoutCurator)
	}
	if root == "" {
		return def, nil
	}
	if !strings.HasPrefix(root, "/") || root == "/" || strings.HasSuffix(root, "/") || strings.Contains(root, "//") {
		return "", fmt.Errorf("root %q: want an absolute znode path such as %s, the adapter's --zk-root", root, def)
	}
	return root, nil
}

// targetAddr is the address of instance j of the ZooKeeper target before
// any change: 10.250 is used by no generated service.
func targetAddr(j int) string { return fmt.Sprintf("10.250.0.%d", j+1) }

// moverVariant is the variant of addr if it is a mover address, else 0.
func moverVariant(addr string) int {
	var a, b int
	if n, err := fmt.Sscanf(addr, "10.251.%d.%d", &a, &b); err != nil || n != 2 || filegen.MoverAddr(a*250+b) != addr {
		return 0
	}
	return a*250 + b
}

// dubboInterface and dubboApp name generated Dubbo service i.
func dubboInterface(i int) string { return fmt.Sprintf("org.galleon.load.Service%05d", i) }
func dubboApp(i int) string       { return fmt.Sprintf("app-%05d", i) }

// dubboURL is the provider URL a Dubbo 2.7 provider of iface registers,
// with the parameters it sends (in its order: sorted), so that znode names
// are as long as real ones.
func dubboURL(iface, app, addr string, pid int) string {
	return fmt.Sprintf("dubbo://%s/%s?anyhost=true&application=%s&deprecated=false&dubbo=2.0.2&dynamic=true&generic=false"+
		"&interface=%s&methods=create,delete,get,list,update&pid=%d&release=2.7.23&side=provider&timestamp=1700000000000&version=1.0.0&weight=100",
		net.JoinHostPort(addr, strconv.Itoa(dubboPort)), iface, app, iface, pid)
}

// curatorID is a UUID-shaped instance id, as Curator makes them, but
// derived from the service and the instance so that a second zk-generate
// finds the nodes of the first.
func curatorID(name string, j int) string {
	h := sha256.Sum256([]byte(name + "/" + strconv.Itoa(j)))
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// zkClient is a ZooKeeper connection with a session. Close ends it and
// waits for the client's goroutines.
type zkClient struct {
	*zk.Conn
	events <-chan zk.Event
	stop   func() bool
}

type zkNopLogger struct{}

func (zkNopLogger) Printf(string, ...any) {}

// dialZK connects to servers and waits for a session. Cancelling ctx closes
// the connection, which makes requests in flight return.
func dialZK(ctx context.Context, servers []string) (*zkClient, error) {
	if len(servers) == 0 {
		return nil, errors.New("--zk-servers is empty: give the ensemble, e.g. --zk-servers 127.0.0.1:2181")
	}
	conn, events, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkNopLogger{}))
	if err != nil {
		return nil, fmt.Errorf("zookeeper %s: %w", strings.Join(servers, ","), err)
	}
	c := &zkClient{Conn: conn, events: events, stop: context.AfterFunc(ctx, conn.Close)}
	timer := time.NewTimer(zkSessionWait)
	defer timer.Stop()
	for {
		select {
		case e := <-events:
			if e.State == zk.StateHasSession {
				// Later events are dropped by the client when nobody reads
				// them; Close drains what is left.
				return c, nil
			}
		case <-timer.C:
			c.Close()
			return nil, fmt.Errorf("no session with zookeeper %s within %v: is it running and is the address right?", strings.Join(servers, ","), zkSessionWait)
		case <-ctx.Done():
			c.Close()
			return nil, ctx.Err()
		}
	}
}

// Close closes the session and returns once the client's goroutines are
// done (the client closes its event channel last).
func (c *zkClient) Close() {
	c.stop()
	c.Conn.Close()
	for range c.events {
	}
}

var zkACL = zk.WorldACL(zk.PermAll)

// ensurePath creates p and its missing ancestors, empty and persistent.
func (c *zkClient) ensurePath(p string) error {
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		if _, err := c.Create(p[:i], nil, 0, zkACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("creating %s: %w", p[:i], err)
		}
	}
	return nil
}

// ZKGenerateConfig sizes a generated ZooKeeper registry.
type ZKGenerateConfig struct {
	Servers []string
	// Layout is ZKLayoutDubbo or ZKLayoutCurator; Root defaults to the
	// adapter's root for it (/dubbo, /services).
	Layout string
	Root   string
	// Services x Instances, plus the target (TargetInterface or
	// TargetService) with Instances instances.
	Services  int
	Instances int
	// Concurrency is how many Multi transactions are in flight; default 8.
	Concurrency int
	// Progress receives a line every 10% or every second; nil: none.
	Progress io.Writer
}

// ZKGenerateStats is what ZKGenerate did.
type ZKGenerateStats struct {
	// Created znodes, and those that were there already (a second run).
	Created, Existing int
	Took              time.Duration
	Root              string
}

// zkService is the znodes of one service: dirs (created empty, in order,
// ancestors first) and the instance nodes under the last one.
type zkService struct {
	dirs  []string
	nodes []zkNode
}

type zkNode struct {
	name string
	data []byte
}

func (s *zkService) ops() int { return len(s.dirs) + len(s.nodes) }

func (s *zkService) bytes() int {
	n := 0
	for _, d := range s.dirs {
		n += len(d) + 64
	}
	parent := s.dirs[len(s.dirs)-1]
	for _, nd := range s.nodes {
		n += len(parent) + 1 + len(nd.name) + len(nd.data) + 64
	}
	return n
}

// zkServiceOf returns generated service i, or the target for i == -1.
func zkServiceOf(layout, root string, i, instances int) zkService {
	var s zkService
	switch layout {
	case ZKLayoutDubbo:
		iface, app, addr := TargetInterface, TargetService, targetAddr
		if i >= 0 {
			iface, app = dubboInterface(i), dubboApp(i)
			addr = func(j int) string { return filegen.InstanceAddr(i, j) }
		}
		// A Dubbo provider subscribes to its interface's configurators (overrides), which
		// creates that node: real registries have it beside providers.
		s.dirs = []string{root + "/" + iface, root + "/" + iface + "/configurators", root + "/" + iface + "/providers"}
		for j := range instances {
			u := dubboURL(iface, app, addr(j), 1000+j)
			s.nodes = append(s.nodes, zkNode{name: url.QueryEscape(u), data: []byte(u)})
		}
	default:
		name, addr := TargetService, targetAddr
		if i >= 0 {
			name = fmt.Sprintf("svc-%05d", i)
			addr = func(j int) string { return filegen.InstanceAddr(i, j) }
		}
		s.dirs = []string{root + "/" + name}
		for j := range instances {
			id := curatorID(name, j)
			// What Curator's JsonInstanceSerializer writes for a Spring Cloud Zookeeper
			// instance, as the adapter's tests write it.
			meta := map[string]string{"instance_status": "UP", "version": "v1"}
			s.nodes = append(s.nodes, zkNode{name: id, data: zktest.CuratorJSON(name, id, addr(j), curatorPort, 0, meta)})
		}
	}
	return s
}

// ZKGenerate writes a registry of cfg.Services x cfg.Instances in cfg.Layout
// under cfg.Root, plus the target service the run changes, as persistent
// znodes (the generator exits; ephemeral nodes would go with it). Services
// are batched into Multi transactions, cfg.Concurrency in flight on one
// session. Nodes that exist already are kept as they are, so it can be run
// again (to finish an interrupted run, or over the result of a previous one).
func ZKGenerate(ctx context.Context, cfg ZKGenerateConfig) (ZKGenerateStats, error) {
	var stats ZKGenerateStats
	if cfg.Services < 1 || cfg.Instances < 1 || cfg.Instances > maxInstances {
		return stats, fmt.Errorf("zk-generate: --services must be at least 1 and --instances 1 to %d", maxInstances)
	}
	root, err := zkRoot(cfg.Layout, cfg.Root)
	if err != nil {
		return stats, fmt.Errorf("zk-generate: %w", err)
	}
	stats.Root = root
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := dialZK(ctx, cfg.Servers)
	if err != nil {
		return stats, err
	}
	defer c.Close()
	start := time.Now()
	if err := c.ensurePath(root); err != nil {
		return stats, err
	}

	total := cfg.Services + 1
	prog := &progress{w: cfg.Progress, total: total, start: start, last: start}
	batches := make(chan []zkService)
	var (
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for b := range batches {
				created, existing, err := c.writeBatch(b)
				if err != nil {
					fail(err)
					continue // drain: the producer stops on ctx
				}
				prog.add(len(b), created, existing)
			}
		})
	}
	var batch []zkService
	ops, size := 0, 0
	send := func() bool {
		if len(batch) == 0 {
			return true
		}
		select {
		case batches <- batch:
		case <-ctx.Done():
			return false
		}
		batch, ops, size = nil, 0, 0
		return true
	}
	for i := -1; i < cfg.Services; i++ {
		s := zkServiceOf(cfg.Layout, root, i, cfg.Instances)
		if ops+s.ops() > multiMaxOps || size+s.bytes() > multiMaxBytes {
			if !send() {
				break
			}
		}
		batch = append(batch, s)
		ops, size = ops+s.ops(), size+s.bytes()
	}
	send()
	close(batches)
	wg.Wait()
	stats.Created, stats.Existing = prog.created, prog.existing
	stats.Took = time.Since(start)
	if firstErr != nil {
		return stats, fmt.Errorf("zk-generate: %w", firstErr)
	}
	if err := ctx.Err(); err != nil {
		return stats, err
	}
	return stats, nil
}

// writeBatch creates the services of b in one Multi. If some of their nodes
// exist already the transaction fails as a whole, and each service is
// completed on its own instead.
func (c *zkClient) writeBatch(b []zkService) (created, existing int, err error) {
	var ops []any
	for _, s := range b {
		for _, d := range s.dirs {
			ops = append(ops, &zk.CreateRequest{Path: d, Acl: zkACL})
		}
		parent := s.dirs[len(s.dirs)-1]
		for _, n := range s.nodes {
			ops = append(ops, &zk.CreateRequest{Path: parent + "/" + n.name, Data: n.data, Acl: zkACL})
		}
	}
	res, err := c.Multi(ops...)
	if err == nil {
		return len(ops), 0, nil
	}
	if !nodeExists(res, err) {
		return 0, 0, fmt.Errorf("creating %d znodes from %s: %w", len(ops), b[0].dirs[0], err)
	}
	for _, s := range b {
		cr, ex, err := c.completeService(s)
		if err != nil {
			return created, existing, err
		}
		created, existing = created+cr, existing+ex
	}
	return created, existing, nil
}

func nodeExists(res []zk.MultiResponse, err error) bool {
	if errors.Is(err, zk.ErrNodeExists) {
		return true
	}
	for _, r := range res {
		if errors.Is(r.Error, zk.ErrNodeExists) {
			return true
		}
	}
	return false
}

// completeService creates what is missing of s: its dirs one by one when
// the instances' parent is missing, then the missing instance nodes in one
// Multi. A complete service (a second run over a finished one) costs one
// read.
func (c *zkClient) completeService(s zkService) (created, existing int, err error) {
	parent := s.dirs[len(s.dirs)-1]
	have, _, err := c.Children(parent)
	switch {
	case err == nil:
		existing += len(s.dirs) // the parent, and so its ancestors
	case errors.Is(err, zk.ErrNoNode):
		for _, d := range s.dirs {
			switch _, err := c.Create(d, nil, 0, zkACL); {
			case err == nil:
				created++
			case errors.Is(err, zk.ErrNodeExists):
				existing++
			default:
				return created, existing, fmt.Errorf("creating %s: %w", d, err)
			}
		}
	default:
		return created, existing, fmt.Errorf("listing %s: %w", parent, err)
	}
	var ops []any
	for _, n := range s.nodes {
		if slices.Contains(have, n.name) {
			existing++
			continue
		}
		ops = append(ops, &zk.CreateRequest{Path: parent + "/" + n.name, Data: n.data, Acl: zkACL})
	}
	if len(ops) == 0 {
		return created, existing, nil
	}
	if _, err := c.Multi(ops...); err != nil {
		return created, existing, fmt.Errorf("creating %d znodes under %s (is another writer busy there?): %w", len(ops), parent, err)
	}
	return created + len(ops), existing, nil
}

// progress prints how far ZKGenerate got, every 10% or every second.
type progress struct {
	w     io.Writer
	total int
	start time.Time

	mu                      sync.Mutex
	done, created, existing int
	last                    time.Time
}

func (p *progress) add(services, created, existing int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	before := p.done * 10 / p.total
	p.done += services
	p.created += created
	p.existing += existing
	now := time.Now()
	if p.done*10/p.total == before && now.Sub(p.last) < time.Second {
		return
	}
	p.last = now
	fmt.Fprintf(p.w, "zk-generate: %d/%d services (%d%%), %d znodes created, %d there already, %v\n",
		p.done, p.total, p.done*100/p.total, p.created, p.existing, now.Sub(p.start).Round(time.Millisecond))
}

// zkChanger moves the first instance of the target service in a ZooKeeper
// registry written by ZKGenerate, one ZooKeeper write per change.
type zkChanger struct {
	c      *zkClient
	layout string
	dir    string // the znode whose children are the target's instances
	// mover is the instance node that moves: its name, its content (the
	// provider URL or the Curator document) and its variant when the run
	// began (0: not moved yet).
	mover string
	url   *url.URL       // dubbo
	doc   map[string]any // curator
	v0    int
}

// newZKChanger connects and finds the target's instance to move: one that
// a previous run moved (its address is a mover address), else the first by
// name.
func newZKChanger(ctx context.Context, servers []string, layout, root string) (*zkChanger, error) {
	root, err := zkRoot(layout, root)
	if err != nil {
		return nil, fmt.Errorf("--zk-layout, --zk-root: %w", err)
	}
	c, err := dialZK(ctx, servers)
	if err != nil {
		return nil, err
	}
	ch := &zkChanger{c: c, layout: layout, dir: root + "/" + TargetService}
	if layout == ZKLayoutDubbo {
		ch.dir = root + "/" + TargetInterface + "/providers"
	}
	if err := ch.findMover(); err != nil {
		c.Close()
		return nil, err
	}
	return ch, nil
}

func (ch *zkChanger) findMover() error {
	kids, _, err := ch.c.Children(ch.dir)
	if err == nil && len(kids) == 0 {
		err = zk.ErrNoNode
	}
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("the target service has no instances at %s: write it with galleon-load zk-generate --layout %s --root %s (or give the --zk-layout and --zk-root the source uses)",
			ch.dir, ch.layout, path.Dir(strings.TrimSuffix(ch.dir, "/providers")))
	}
	if err != nil {
		return fmt.Errorf("listing the target's instances at %s: %w", ch.dir, err)
	}
	slices.Sort(kids)
	for _, k := range kids {
		addr, err := ch.read(k)
		if err != nil {
			return err
		}
		if v := moverVariant(addr); v > 0 || ch.mover == "" {
			ch.mover, ch.v0 = k, v
			if v > 0 {
				break
			}
		}
	}
	// Leave ch.url / ch.doc holding the mover's content.
	_, err = ch.read(ch.mover)
	return err
}

// read loads instance node name into ch.url or ch.doc and returns its
// address.
func (ch *zkChanger) read(name string) (string, error) {
	p := ch.dir + "/" + name
	if ch.layout == ZKLayoutDubbo {
		raw, err := url.QueryUnescape(name)
		if err != nil {
			return "", fmt.Errorf("%s: not a URL-encoded provider URL: %w", p, err)
		}
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			return "", fmt.Errorf("%s: not a provider URL (want dubbo://<ip>:<port>/<interface>?...): %v", p, err)
		}
		ch.url = u
		return u.Hostname(), nil
	}
	data, _, err := ch.c.Get(p)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", p, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return "", fmt.Errorf("%s: not a Curator instance in JSON: %w", p, err)
	}
	addr, _ := doc["address"].(string)
	if addr == "" {
		return "", fmt.Errorf(`%s: no "address": not a Curator instance`, p)
	}
	ch.doc = doc
	return addr, nil
}

// Change moves the mover to a new address: for Dubbo its provider node is
// deleted and one for the new address created in one Multi (a provider
// leaving as another joins); for Curator its node's data is set. Either is
// one transaction, so the adapter never sees a half-made change.
func (ch *zkChanger) Change(_ context.Context, i int) (time.Time, string, error) {
	addr := filegen.MoverAddr((ch.v0+i-1)%moverVariants + 1)
	if ch.layout == ZKLayoutDubbo {
		u := *ch.url
		u.Host = net.JoinHostPort(addr, u.Port())
		raw := u.String()
		name := url.QueryEscape(raw)
		t0 := time.Now()
		if _, err := ch.c.Multi(
			&zk.DeleteRequest{Path: ch.dir + "/" + ch.mover, Version: -1},
			&zk.CreateRequest{Path: ch.dir + "/" + name, Data: []byte(raw), Acl: zkACL},
		); err != nil {
			return t0, "", fmt.Errorf("moving provider %s of %s to %s: %w (did something else change the target?)", ch.url.Host, TargetInterface, addr, err)
		}
		ch.mover, ch.url = name, &u
		return t0, addr, nil
	}
	doc := make(map[string]any, len(ch.doc))
	for k, v := range ch.doc {
		doc[k] = v
	}
	doc["address"] = addr
	data, err := json.Marshal(doc)
	if err != nil {
		return time.Time{}, "", err
	}
	t0 := time.Now()
	if _, err := ch.c.Set(ch.dir+"/"+ch.mover, data, -1); err != nil {
		return t0, "", fmt.Errorf("moving instance %s of %s to %s: %w", ch.mover, TargetService, addr, err)
	}
	ch.doc = doc
	return t0, addr, nil
}

func (ch *zkChanger) Close() { ch.c.Close() }

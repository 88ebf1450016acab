package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
	"github.com/galleon-mesh/galleon/bench/internal/benchrun"
	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
)

const zookeeperHelp = `galleon-bench zookeeper measures galleon-zookeeper at scale against a real ZooKeeper 3.8 and
prints the results as markdown table rows (| measure | value |), ready to paste into
docs/benchmarks.md. It mirrors the galleon-file end-to-end measures there (start -> ready, change
-> every sink for Delta and SotW, bytes per sink, resident and peak memory) and adds ZooKeeper's
own: the adapter's listing, the server's watch count, requests per change, and a session expiry
with its relisting.

  go run ./cmd/galleon-bench zookeeper                        10,000 services x 10 instances, Dubbo layout
  SERVICES=1000 go run ./cmd/galleon-bench zookeeper          the same at 1,000 services
  go run ./cmd/galleon-bench zookeeper --services 1000 --instances 10 --layout curator --sinks 10 --changes 100

Settings (environment, or the flag of the same name in lower case; a flag wins):
  SERVICES  (--services)   services (Dubbo interfaces, Curator services), default 10000
  INSTANCES (--instances)  instances (providers) per service, 1-250, default 10
  LAYOUT    (--layout)     dubbo or curator (the adapter's --zk-layout), default dubbo
  SINKS     (--sinks)      sinks of each galleon-load run, default 10
  CHANGES   (--changes)    changes of each galleon-load run, default 100
  INTERVAL  (--interval)   pause after each change reached every sink, default 20ms (as in
                           docs/benchmarks.md)
  GALLEON_ARGS             extra flags for galleon-zookeeper, e.g. '--debounce-quiet 1ms'

Steps, one process at a time (the figures mean something only on a quiet machine: the load
average is printed at the start and the end):
  1. ZooKeeper 3.8 standalone (zktest: the Debian package, installed when missing) on a free
     loopback port in a temporary directory: java -Xmx1g, tickTime=500 (sessions of 1-10 s), no
     admin server, four-letter words ruok, srvr, mntr, cons, wchs;
  2. galleon-load zk-generate writes the registry;
  3. galleon-zookeeper starts (--log-level debug, --zk-session-timeout 4s): start -> /readyz 200,
     and its own listing time (its debug line ` + "`read ZooKeeper reads=N took=D`" + `);
  4. its VmRSS and VmHWM (/proc/<pid>/status) and ZooKeeper's zk_watch_count (mntr);
  5. galleon-load run, --protocol delta then sotw, against it (raw output printed);
  6. its session expires: SIGSTOP, one provider moved meanwhile (a ZooKeeper client of this
     program's), wait until ZooKeeper's cons no longer lists the session (20 s at most), SIGCONT;
     resume -> the relisting's ` + "`read ZooKeeper`" + ` line;
  7. VmHWM at the end.
Everything started is stopped on exit, failure or Ctrl-C; the temporary directory is removed
(its logs are kept when something failed, and the failure line says where; not on Ctrl-C).

Needs: go, a Java runtime and ZooKeeper 3.8 (zktest installs the Debian package when missing);
Linux (/proc).
`

// zookeeperSettings are bench-zookeeper's settings, checked.
type zookeeperSettings struct {
	registrySettings
	services int
	layout   string
	root     string // the layout's root znode
	interval string
}

func parseZooKeeper(args []string) (zookeeperSettings, error) {
	var s zookeeperSettings
	var layout, interval *string
	err := s.parse("zookeeper", zookeeperHelp, args, sizeSetting{"SERVICES", "10000", "services (Dubbo interfaces, Curator services)"}, "100", func(fs *flag.FlagSet) {
		layout = fs.String("layout", benchrun.Env("LAYOUT", "dubbo"), "LAYOUT: dubbo or curator (the adapter's --zk-layout)")
		interval = fs.String("interval", benchrun.Env("INTERVAL", "20ms"), "INTERVAL: pause after each change reached every sink")
	})
	if err != nil {
		return s, err
	}
	s.services = s.size
	switch s.layout = *layout; s.layout {
	case "dubbo":
		s.root = "/dubbo"
	case "curator":
		s.root = "/services"
	default:
		return s, fmt.Errorf("LAYOUT=%s: want dubbo or curator", s.layout)
	}
	s.interval = *interval
	return s, nil
}

func runZooKeeper(ctx context.Context, args []string) error {
	s, err := parseZooKeeper(args)
	return runRegistry(ctx, "bench-zookeeper", "galleon-zookeeper", s.galleonArgs, err, func(b *registryBench) registryRun {
		return &zkBench{zookeeperSettings: s, registryBench: b}
	})
}

// zkBench is one run of bench-zookeeper.
type zkBench struct {
	zookeeperSettings
	*registryBench

	server             *zktest.Server
	zkVersion, javaVer string
	adapter            *adapterProc // galleon-zookeeper
	session            string       // its session, 0x...
	watchesSync        string       // ZooKeeper's watches once it was ready
}

func (z *zkBench) settings() (workName, what string) {
	return "bench-zk", fmt.Sprintf("%d services x %d instances (%s layout), %d sinks, %d changes (interval %s)", z.services, z.instances, z.layout, z.sinks, z.changes, z.interval)
}

func (z *zkBench) steps() []func(context.Context) error {
	return []func(context.Context) error{z.startServer, z.generate, z.startAdapter, z.synced, z.loadRuns, z.expireSession, z.peakMemory}
}

func (z *zkBench) result() (title, machine string) {
	return fmt.Sprintf("galleon-zookeeper, %d services x %d instances (%s), %d sinks, %d changes", z.services, z.instances, z.layout, z.sinks, z.changes),
		fmt.Sprintf("%d CPUs (nproc), %s, ZooKeeper %s on Java %s (-Xmx1g)", z.nproc, z.goVersion, z.zkVersion, z.javaVer)
}

// stop stops galleon-zookeeper, then ZooKeeper.
func (z *zkBench) stop() {
	if z.adapter != nil {
		z.adapter.Stop()
	}
	if z.server != nil {
		_ = z.server.Close()
	}
}

var (
	zkVersionLine = regexp.MustCompile(`(?m)^Zookeeper version: ([^-,]*)`)
	javaVersion   = regexp.MustCompile(`"([^"]*)"`)
)

// 1. ZooKeeper: tickTime 500 ms (sessions of 1-10 s, so the adapter's 4 s is granted as asked),
// no admin server, the four-letter words used here; a 1 GB heap: at the default scale the
// registry is 130,000 znodes.
func (z *zkBench) startServer(ctx context.Context) error {
	z.Step("1. ZooKeeper 3.8 standalone")
	dir := filepath.Join(z.Dir, "zookeeper")
	z.Bulky = append(z.Bulky, filepath.Join(dir, "data"))
	java, _, err := zktest.ToolPaths(ctx)
	if err != nil {
		return err
	}
	t0 := time.Now()
	srv, err := zktest.StartServer(ctx, zktest.Options{Dir: dir, TickTime: 500 * time.Millisecond, HeapMiB: 1024, Detach: serverproc.Detach{Session: true}})
	if err != nil {
		return fmt.Errorf("ZooKeeper did not start: %w (see %s)", err, filepath.Join(dir, "zookeeper.log"))
	}
	z.server = srv
	srvr, _ := srv.FourLetter("srvr")
	z.zkVersion = submatch(zkVersionLine, srvr)
	out, _ := exec.CommandContext(ctx, java, "-version").CombinedOutput()
	first, _, _ := strings.Cut(string(out), "\n")
	z.javaVer = submatch(javaVersion, first)
	z.Say("ZooKeeper %s (pid %d, Java %s) serves on %s, ready in %s s", z.zkVersion, srv.Pid(), z.javaVer, srv.Addr(), benchrun.Secs(t0, time.Now()))
	return nil
}

// mntr is one value of ZooKeeper's mntr.
func (z *zkBench) mntr(key string) (string, error) {
	out, err := z.server.FourLetter("mntr")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == key {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("ZooKeeper's mntr has no %s", key)
}

// mntrOr is mntr's value, "?" when there is none.
func (z *zkBench) mntrOr(key string) string {
	v, err := z.mntr(key)
	if err != nil {
		return "?"
	}
	return v
}

// alive fails when ZooKeeper has exited.
func (z *zkBench) alive() error {
	if !z.server.Running() {
		return fmt.Errorf("ZooKeeper exited (see %s)", filepath.Join(z.server.Dir(), "zookeeper.log"))
	}
	return nil
}

var (
	zkGenCreated = regexp.MustCompile(`: ([0-9]*) znodes created`)
	zkGenTook    = regexp.MustCompile(` there already, in (\S*)\n?$`)
)

// 2. galleon-load zk-generate.
func (z *zkBench) generate(ctx context.Context) error {
	z.Step("2. galleon-load zk-generate")
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, z.loadBin, "zk-generate", "--zk-servers", z.server.Addr(), "--layout", z.layout,
		"--services", strconv.Itoa(z.services), "--instances", strconv.Itoa(z.instances))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	_ = os.WriteFile(filepath.Join(z.LogDir, "zk-generate.out"), out, 0o644)
	_ = os.WriteFile(filepath.Join(z.LogDir, "zk-generate.err"), []byte(stderr.String()), 0o644)
	if err != nil {
		return fmt.Errorf("galleon-load zk-generate: %s", lastLine(stderr.String()))
	}
	wall := benchrun.Secs(t0, time.Now())
	fmt.Fprint(z.Out, string(out))
	z.row("registry", fmt.Sprintf("%d services x %d instances + the load target, %s layout: %s znodes written (ZooKeeper: zk_znode_count %s, zk_approximate_data_size %s B)",
		z.services, z.instances, z.layout, or(submatch(zkGenCreated, string(out))), z.mntrOr("zk_znode_count"), z.mntrOr("zk_approximate_data_size")))
	z.row("galleon-load zk-generate (8 Multi transactions in flight)", fmt.Sprintf("%s s wall (its own: %s)", wall, or(submatch(zkGenTook, string(out)))))
	return nil
}

// galleon-zookeeper's log lines the run reads.
const (
	readZooKeeper = `msg="read ZooKeeper"`
	relistingLine = `msg="ZooKeeper session expired: relisting every service on the new session"`
)

var sessionEstablished = regexp.MustCompile(`msg="ZooKeeper session established".* session=(0x[0-9a-f]*)`)

// 3. galleon-zookeeper: start -> /readyz 200, and its listing: the rounds of reads it logged
// before ready (a round of one read is not logged); the largest is the one that reads every
// service.
func (z *zkBench) startAdapter(ctx context.Context) error {
	z.Step("3. start galleon-zookeeper")
	a, err := z.registryBench.startAdapter(ctx, func(xds, http string) []string {
		return []string{"--zk-servers", z.server.Addr(), "--zk-layout", z.layout, "--listen", xds, "--http", http,
			"--zk-session-timeout", "4s", "--log-level", "debug"}
	}, 10*time.Minute, 50*time.Millisecond, z.alive)
	if err != nil {
		return err
	}
	z.adapter = a
	var rounds, allReads, bigReads int
	var big string
	_ = logLines(a.Log, func(l string) bool {
		if !strings.Contains(l, readZooKeeper) {
			return true
		}
		r, _ := strconv.Atoi(logField(l, "reads"))
		rounds++
		allReads += r
		if r > bigReads {
			bigReads, big = r, l
		}
		return true
	})
	if rounds == 0 {
		return errors.New(`galleon-zookeeper logged no "read ZooKeeper ... reads=N took=D" debug line by the time it was ready`)
	}
	took := logField(big, "took")
	z.Say("listing: %d logged round(s), the largest: reads=%d took=%s services=%s", rounds, bigReads, took, logField(big, "services"))
	z.row("start → /readyz 200", a.ready+" s")
	z.row("the adapter's listing (largest `read ZooKeeper` round)",
		fmt.Sprintf("%d reads in %s s (took=%s; %d logged round(s) before ready, %d reads, besides the root's read, a round of one, not logged)", bigReads, durSecs(took), took, rounds, allReads))
	_ = logLines(a.Log, func(l string) bool {
		if m := sessionEstablished.FindStringSubmatch(l); m != nil {
			z.session = m[1]
		}
		return true
	})
	if z.session == "" {
		return errors.New(`galleon-zookeeper logged no "ZooKeeper session established ... session=0x..."`)
	}
	return nil
}

// 4. memory and watches after sync.
func (z *zkBench) synced(context.Context) error {
	z.Step("4. memory and watches after sync")
	rss, hwm, err := z.adapter.memory()
	if err != nil {
		return err
	}
	if z.watchesSync, err = z.mntr("zk_watch_count"); err != nil {
		return err
	}
	z.Say("VmRSS %s, VmHWM %s; ZooKeeper zk_watch_count %s", benchrun.MiB(rss), benchrun.MiB(hwm), z.watchesSync)
	z.row("resident memory once ready (VmRSS / VmHWM)", benchrun.MiB(rss)+" / "+benchrun.MiB(hwm))
	z.row("ZooKeeper watches once ready (mntr zk_watch_count)", z.watchesSync)
	return nil
}

// 5. galleon-load run, Delta then SotW.
func (z *zkBench) loadRuns(ctx context.Context) error {
	for _, p := range []struct{ proto, label string }{{"delta", "Delta"}, {"sotw", "SotW"}} {
		z.Step("5. galleon-load run, " + p.label)
		out, err := z.galleonLoad(ctx, "run-"+p.proto+".out", "run", "--addr", z.adapter.xds, "--zk-servers", z.server.Addr(), "--zk-layout", z.layout,
			"--sinks", strconv.Itoa(z.sinks), "--protocol", p.proto, "--changes", strconv.Itoa(z.changes), "--interval", z.interval,
			"--metrics", "http://"+z.adapter.http+"/metrics")
		if err != nil {
			return err
		}
		r, err := parseLoadRun(out)
		if err != nil {
			return fmt.Errorf("%w (%s)", err, p.label)
		}
		sync := ""
		if r.sync != "" {
			sync = fmt.Sprintf("%s (%s B per sink)", r.sync, r.syncBytes)
		}
		z.row(fmt.Sprintf("initial sync, %d %s sinks", z.sinks, p.label), or(sync))
		z.row(fmt.Sprintf("ZooKeeper change → every %s sink (%d changes)", p.label, z.changes), fmt.Sprintf("p50 %s, p99 %s (max %s)", r.p50, r.p99, or(r.max)))
		z.row("bytes per sink per change, "+p.label, or(r.bytes)+" B")
		z.row("updates per sink, "+p.label, or(r.updates))
		z.row("ZooKeeper requests per change, "+p.label, or(r.zkRequests))
	}
	rss, hwm, err := z.adapter.memory()
	if err != nil {
		return err
	}
	z.row("resident memory after both runs (VmRSS / VmHWM)", benchrun.MiB(rss)+" / "+benchrun.MiB(hwm))
	return nil
}

// moveNewAddr is where the expiry step moves one instance to.
const moveNewAddr = "10.252.0.1"

// zkSessionExpiry is how long after the SIGSTOP ZooKeeper has to drop the adapter's 4 s session.
const zkSessionExpiry = 20 * time.Second

var (
	dubboProvider  = regexp.MustCompile(`^dubbo%3A%2F%2F[0-9.]+(%3A.*)$`)
	curatorAddress = regexp.MustCompile(`"address":"[^"]*"`)
)

// instanceMove is one instance moved to another address while the adapter is stopped: the
// first instance of the first generated service, deleted and created again under a new name.
type instanceMove struct {
	dir, oldNode, newNode string
	data                  []byte
}

// planMove reads the instance to move and makes its new node.
func (z *zkBench) planMove(conn *zk.Conn) (instanceMove, error) {
	m := instanceMove{dir: z.root + "/svc-00000"}
	if z.layout == "dubbo" {
		m.dir = z.root + "/org.galleon.load.Service00000/providers"
	}
	children, _, err := conn.Children(m.dir)
	if err != nil {
		return m, fmt.Errorf("cannot list %s in ZooKeeper: %w", m.dir, err)
	}
	if len(children) == 0 {
		return m, fmt.Errorf("ZooKeeper lists nothing under %s", m.dir)
	}
	slices.Sort(children)
	m.oldNode = children[0]
	var data []byte
	if z.layout == "curator" {
		if data, _, err = conn.Get(m.dir + "/" + m.oldNode); err != nil {
			return m, fmt.Errorf("cannot read instance %s/%s in ZooKeeper: %w", m.dir, m.oldNode, err)
		}
	}
	m.newNode, m.data, err = movedNode(z.layout, m.oldNode, data)
	return m, err
}

// movedNode is the node and data of an instance moved to moveNewAddr: for Dubbo the same
// provider URL at another address, no data (the adapter reads the name only); for Curator the
// instance's JSON at another address, under another id.
func movedNode(layout, oldNode string, data []byte) (string, []byte, error) {
	if layout == "dubbo" {
		sm := dubboProvider.FindStringSubmatch(oldNode)
		if sm == nil {
			return "", nil, fmt.Errorf("cannot find the address in provider node %s", oldNode)
		}
		return "dubbo%3A%2F%2F" + moveNewAddr + sm[1], nil, nil
	}
	newNode := "bench-moved-" + oldNode
	data = curatorAddress.ReplaceAll(data, []byte(`"address":"`+moveNewAddr+`"`))
	return newNode, []byte(strings.Replace(string(data), `"id":"`+oldNode+`"`, `"id":"`+newNode+`"`, 1)), nil
}

// do deletes the old node and creates the new one, and checks that the service lists the new
// one only.
func (m instanceMove) do(conn *zk.Conn) error {
	if err := conn.Delete(m.dir+"/"+m.oldNode, -1); err != nil {
		return fmt.Errorf("delete %s/%s: %w", m.dir, m.oldNode, err)
	}
	if _, err := conn.Create(m.dir+"/"+m.newNode, m.data, 0, zk.WorldACL(zk.PermAll)); err != nil {
		return fmt.Errorf("create %s/%s: %w", m.dir, m.newNode, err)
	}
	listed, _, err := conn.Children(m.dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", m.dir, err)
	}
	if !slices.Contains(listed, m.newNode) || slices.Contains(listed, m.oldNode) {
		return fmt.Errorf("moving the instance failed: %s lists '%s'", m.dir, strings.Join(listed, " "))
	}
	return nil
}

// nopLogger keeps the ZooKeeper client's connection messages out of the report.
type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// statusSeq is the adapter's served snapshot's sequence number (/debug/status "seq"): it moves
// on when the moved instance is served.
func (z *zkBench) statusSeq(ctx context.Context) (uint64, error) {
	body, err := benchrun.HTTPGet(ctx, "http://"+z.adapter.http+"/debug/status", 2*time.Second)
	if err != nil {
		return 0, err
	}
	var st struct {
		Seq *uint64 `json:"seq"`
	}
	if err := json.Unmarshal(body, &st); err != nil || st.Seq == nil {
		return 0, errors.New(`galleon-zookeeper's /debug/status has no "seq"`)
	}
	return *st.Seq, nil
}

// 6. session expiry: the adapter SIGSTOPped past its 4 s session, one instance moved meanwhile,
// SIGCONT; then its relisting on the new session.
func (z *zkBench) expireSession(ctx context.Context) error {
	z.Step("6. session expiry")
	conn, err := z.sessionConn()
	if err != nil {
		return err
	}
	z.Say("galleon-zookeeper's session %s: %s", z.session, strings.TrimSpace(conn))
	client, _, err := zk.Connect([]string{z.server.Addr()}, 10*time.Second, zk.WithLogger(nopLogger{}), zk.WithDialer(zktest.ClientDial))
	if err != nil {
		return fmt.Errorf("cannot connect to ZooKeeper at %s: %w", z.server.Addr(), err)
	}
	defer client.Close()
	move, err := z.planMove(client)
	if err != nil {
		return err
	}
	seq0, err := z.statusSeq(ctx)
	if err != nil {
		return err
	}
	relists0 := countLines(z.adapter.Log, relistingLine)

	z.Say("kill -STOP %d", z.adapter.Pid())
	if err := z.adapter.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("cannot stop galleon-zookeeper: %w", err)
	}
	tStop := time.Now()
	z.Say("meanwhile: delete %s/%s, create %s/%s", move.dir, move.oldNode, move.dir, move.newNode)
	if err := move.do(client); err != nil {
		return err
	}
	z.Say("moved in %s s after the stop (a ZooKeeper client of this program's)", benchrun.Secs(tStop, time.Now()))
	expired, err := z.waitExpired(ctx, tStop)
	if err != nil {
		return err
	}
	z.Say("ZooKeeper expired session %s %s s after the stop (cons no longer lists it)", z.session, expired)
	z.Say("kill -CONT %d", z.adapter.Pid())
	if err := z.adapter.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("cannot resume galleon-zookeeper: %w", err)
	}
	tCont := time.Now()

	relist, read, err := z.waitRelisting(ctx, relists0)
	if err != nil {
		return err
	}
	tSeen := time.Now()
	relistReads, relistTook := logField(read, "reads"), logField(read, "took")
	// Resume -> the lines, by their own timestamps (ms); else when they were seen.
	doneS := "<= " + benchrun.Secs(tCont, tSeen)
	if t, err := logTime(read); err == nil {
		doneS = benchrun.Secs(tCont, t)
	}
	newSessionS := "?"
	if t, err := logTime(relist); err == nil {
		newSessionS = benchrun.Secs(tCont, t)
	}
	z.Say("new session %s %s s after the resume; relisting read: reads=%s took=%s, logged %s s after the resume", logField(relist, "new_session"), newSessionS, relistReads, relistTook, doneS)

	var seq uint64
	err = benchrun.WaitFor(ctx, time.Minute, 50*time.Millisecond, fmt.Sprintf("galleon-zookeeper serving the moved instance (/debug/status seq past %d)", seq0), func() (bool, error) {
		seq, _ = z.statusSeq(ctx)
		return seq > seq0, z.alive()
	}, z.adapter.Proc)
	if err != nil {
		return err
	}
	servedS := benchrun.Secs(tCont, time.Now())
	z.Say("the moved instance served (snapshot seq %d -> %d) <= %s s after the resume (/debug/status polled)", seq0, seq, servedS)
	if err := sleep(ctx, time.Second); err != nil { // the relisting's answers applied and watches set
		return err
	}
	watches := z.mntrOr("zk_watch_count")
	m, err := z.adapter.metrics(ctx)
	if err != nil {
		return fmt.Errorf("%w after the resume", err)
	}
	if benchrun.MetricSum(m, "galleon_zookeeper_relists_total", `reason="session_expired"`) == 0 {
		return errors.New(`galleon_zookeeper_relists_total{reason="session_expired"} is not counted after the expiry`)
	}
	z.row("session expiry: SIGSTOP → ZooKeeper drops the session (4 s timeout; cons polled)", expired+" s")
	z.row("session expiry: SIGCONT → new session logged", newSessionS+" s")
	z.row("session expiry: SIGCONT → relisting read done (its `read ZooKeeper` line)", doneS+" s")
	z.row("session expiry: SIGCONT → the moved instance served (/debug/status seq polled)", "<= "+servedS+" s")
	z.row("the relisting on the new session (one instance moved meanwhile)", fmt.Sprintf("%s reads in %s s (took=%s)", relistReads, durSecs(relistTook), relistTook))
	z.row("ZooKeeper watches after the relisting (mntr zk_watch_count)", fmt.Sprintf("%s (before: %s)", watches, z.watchesSync))
	return nil
}

// sessionConn is ZooKeeper's cons line of the adapter's session.
func (z *zkBench) sessionConn() (string, error) {
	cons, _ := z.server.FourLetter("cons")
	for _, l := range strings.Split(cons, "\n") {
		if strings.Contains(l, "sid="+z.session+",") {
			return l, nil
		}
	}
	return "", fmt.Errorf("ZooKeeper's cons does not list galleon-zookeeper's session %s", z.session)
}

// waitExpired polls cons until it no longer lists the adapter's session, for up to 20 s after
// the stop; it returns the seconds since.
func (z *zkBench) waitExpired(ctx context.Context, tStop time.Time) (string, error) {
	for time.Since(tStop) <= zkSessionExpiry {
		if cons, err := z.server.FourLetter("cons"); err == nil && cons != "" && !strings.Contains(cons, "sid="+z.session+",") {
			return benchrun.Secs(tStop, time.Now()), nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("ZooKeeper still lists session %s %.0f s after galleon-zookeeper was stopped (cons)", z.session, zkSessionExpiry.Seconds())
}

// waitRelisting waits for the adapter's relisting after the expiry: a relisting line past the
// relists0 logged before, then the first "read ZooKeeper" line after it.
func (z *zkBench) waitRelisting(ctx context.Context, relists0 int) (relist, read string, err error) {
	what := `galleon-zookeeper's relisting after the expiry ("relisting every service on the new session", then "read ZooKeeper ... took=")`
	err = benchrun.WaitFor(ctx, 2*time.Minute, 50*time.Millisecond, what, func() (bool, error) {
		relist, read = "", ""
		seen := 0
		_ = logLines(z.adapter.Log, func(l string) bool {
			switch {
			case strings.Contains(l, relistingLine):
				if seen++; seen > relists0 {
					relist = l
				}
			case relist != "" && strings.Contains(l, readZooKeeper):
				read = l
				return false
			}
			return true
		})
		return read != "", z.alive()
	}, z.adapter.Proc)
	return relist, read, err
}

// 7. peak memory.
func (z *zkBench) peakMemory(context.Context) error {
	z.Step("7. peak memory")
	rss, hwm, err := z.adapter.memory()
	if err != nil {
		return err
	}
	z.Say("VmHWM %s, VmRSS %s", benchrun.MiB(hwm), benchrun.MiB(rss))
	z.row("peak resident memory (VmHWM, at the end, after the relisting; VmRSS then)", fmt.Sprintf("%s (VmRSS %s)", benchrun.MiB(hwm), benchrun.MiB(rss)))
	return nil
}

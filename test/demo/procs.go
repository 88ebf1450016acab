package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/test/internal/proc"

	"regexp"
)

// member is a process the demo started: how to tell it died, how to stop it, its logs for a
// failure and its line in the DEMO_KEEP=1 listing.
type member struct {
	name    string
	pid     func() int
	exited  func() bool
	stop    func()
	logs    []namedLog
	keepMsg func() string // "" leaves it out of the listing
}

// crew is every process the demo started, stopped in reverse order.
type crew struct {
	mu      sync.Mutex
	members []*member
	retired []*member // crashed on purpose: no longer watched, their logs still tailed
}

func (c *crew) add(m *member) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members = append(c.members, m)
}

// retire stops watching m, which the demo is about to kill (its exit is no failure), and keeps
// its logs for a failure.
func (c *crew) retire(m *member) {
	c.remove(m)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.retired = append(c.retired, m)
}

// remove forgets m (stopped on purpose and replaced: its exit is no failure).
func (c *crew) remove(m *member) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members = slices.DeleteFunc(c.members, func(x *member) bool { return x == m })
}

func (c *crew) list() []*member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.members)
}

// deadOne is the first member that has exited, or nil.
func (c *crew) deadOne() *member {
	for _, m := range c.list() {
		if m.exited() {
			return m
		}
	}
	return nil
}

// stopAll stops every member, the last started first.
func (c *crew) stopAll() {
	ms := c.list()
	for i := len(ms) - 1; i >= 0; i-- {
		ms[i].stop()
	}
}

func (c *crew) logs() []namedLog {
	c.mu.Lock()
	all := append(slices.Clone(c.members), c.retired...)
	c.mu.Unlock()
	var out []namedLog
	for _, m := range all {
		out = append(out, m.logs...)
	}
	return out
}

// waitUntil polls cond until it holds; it fails with what after timeout, or as soon as one of the
// demo's processes has exited. An error of cond counts as "not yet" and is quoted on timeout.
func (d *demo) waitUntil(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := proc.WaitFor(ctx, func() (bool, error) {
		if m := d.crew.deadOne(); m != nil {
			return false, proc.Permanent(fmt.Errorf("%s exited while waiting for: %s", m.name, what))
		}
		return cond(ctx)
	})
	if err != nil && ctx.Err() != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("timed out after %v waiting for: %s (%v)", timeout, what, err)
	}
	return err
}

// buildGalleon builds the galleon binaries the demo runs into the demo's bin directory.
func (d *demo) buildGalleon(ctx context.Context, cmds ...string) error {
	root, err := toolcache.RepoRoot()
	if err != nil {
		return fmt.Errorf("the repository cannot be found: %v (run the demo from within it: cd test && go run ./demo)", err)
	}
	args := []string{"build", "-o", d.binDir + "/"}
	for _, c := range cmds {
		args = append(args, "./cmd/"+c)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s failed: %v (see its output above)", strings.Join(cmds, " "), err)
	}
	return nil
}

// daemon is a running galleon binary.
type daemon struct {
	name      string
	XDS, HTTP string // --listen (MCP over xDS) and --http (/readyz, /metrics, /debug/status)
	LogPath   string
	srv       *serverproc.Server
	client    *http.Client
}

// startDaemon runs the galleon binary name with args on free loopback ports and waits until
// /readyz answers 200 (it has listed its registry) and its xDS port accepts connections.
func (d *demo) startDaemon(ctx context.Context, name string, args ...string) (*daemon, error) {
	g := &daemon{name: name, LogPath: filepath.Join(d.logDir, name+".log"), client: d.client}
	g.srv = serverproc.New(serverproc.Spec{
		Prefix: "demo", Name: name, LogPath: g.LogPath, Ports: 2,
		Configure: func(ports []int) error {
			g.XDS = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
			g.HTTP = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
			return nil
		},
		Command: func() *exec.Cmd {
			cmd := exec.Command(filepath.Join(d.binDir, name), append(args,
				"--listen", g.XDS, "--http", g.HTTP, "--shutdown-grace", "1s")...)
			cmd.Dir = d.dir
			cmd.Env = daemonEnv()
			return cmd
		},
		Ready: g.ready, StartTimeout: 20 * time.Second, Detach: d.detach(),
	})
	if err := g.srv.StartContext(ctx); err != nil {
		return nil, err
	}
	d.daemons[name] = g
	d.crew.add(&member{
		name: name, pid: g.srv.Pid, exited: func() bool { return !g.srv.Running() },
		stop: func() { g.srv.Stop() }, logs: []namedLog{{name, g.LogPath}},
		keepMsg: func() string {
			return fmt.Sprintf("pid %d  MCP %s   http://%s/debug/status   log %s", g.srv.Pid(), g.XDS, g.HTTP, g.LogPath)
		},
	})
	return g, nil
}

// daemonEnv is the demo's environment without GALLEON_* variables (the daemons read them as
// flags) and CONSUL_* ones (galleon-consul reads them as defaults: an ACL token, TLS files).
func daemonEnv() []string {
	return proc.Env(nil, nil, []string{"GALLEON_", "CONSUL_"})
}

func (g *daemon) ready(ctx context.Context) error {
	if _, err := g.get(ctx, "/readyz"); err != nil {
		return err
	}
	return proc.DialOK(g.XDS)
}

// get is the body of a 200 answer to GET path on the daemon's HTTP port.
func (g *daemon) get(ctx context.Context, path string) ([]byte, error) {
	return serverproc.Get(ctx, g.client, "http://"+g.HTTP+path, 5*time.Second)
}

// galleonctl runs galleonctl with args and returns what it printed.
func (d *demo) galleonctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.galleonctlPath(), args...)
	cmd.Env = daemonEnv()
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("galleonctl %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

func (d *demo) galleonctlPath() string { return filepath.Join(d.binDir, "galleonctl") }

// names is what the daemon serves, sorted (galleonctl get -o names).
func (d *demo) names(ctx context.Context, g *daemon) ([]string, error) {
	out, err := d.galleonctl(ctx, "get", "--addr", g.XDS, "-o", "names")
	if err != nil {
		return nil, err
	}
	names := strings.Fields(out)
	slices.Sort(names)
	return names, nil
}

// detach is how the demo's processes stand to it: in sessions of their own (a Ctrl-C reaches
// only the demo, which stops them), and with DEMO_KEEP=1 outliving it.
func (d *demo) detach() serverproc.Detach {
	return serverproc.Detach{Session: true, Outlive: d.keep}
}

// serverBinary is a third-party server's binary from the tool cache, built first when missing:
// then firstRun (what takes long) is said before the build's progress.
func (d *demo) serverBinary(ctx context.Context, recipe toolcache.Recipe, firstRun ...string) (string, error) {
	if _, err := recipe.Path(); err != nil { // not cached
		for _, line := range firstRun {
			d.note("%s", line)
		}
	}
	t0 := time.Now()
	bin, err := recipe.Build(ctx, d.progress())
	if err != nil {
		return "", err
	}
	d.ok("%s (%s)", bin, since(t0))
	return bin, nil
}

// showLog shows, as grep would, the lines of the daemon's log that match lines, each without
// what noise matches (the fields named by leftOut), and returns them.
func (d *demo) showLog(g *daemon, lines, noise *regexp.Regexp, leftOut string) []string {
	d.command("grep -E '%s' %s    %s", lines, g.LogPath, d.dimmed("# "+leftOut+" left out"))
	var picked []string
	for _, line := range strings.Split(readFile(g.LogPath), "\n") {
		if lines.MatchString(line) {
			picked = append(picked, noise.ReplaceAllString(line, ""))
		}
	}
	if len(picked) > 0 {
		d.indent(strings.Join(picked, "\n"))
	}
	return picked
}

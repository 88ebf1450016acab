// Package nacosclient is the official Nacos Go client (github.com/nacos-group/nacos-sdk-go/v2)
// configured as a Nacos user configures it, for the tests and the demo: instances registered
// through it take the path a Nacos 2.x application takes to the server (gRPC, the HTTP port +
// 1000, ephemeral instances bound to the client's connection).
//
// What a test must not inherit from the client is kept in a directory of the caller's: the
// client writes its log file (nacos-sdk.log) under LogDir and its service cache under CacheDir,
// both by default in the process's working directory; here both are under Options.Dir, the
// cache is not loaded at start, and the client's logger (one per process, the SDK's global
// logger) is replaced by a quiet one once the client is built (NewNamingClient replaces it with
// a file logger first: see naming_client.NewNamingClientWithRamCredentialProvider, initLogger).
package nacosclient

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nacos-group/nacos-sdk-go/v2/clients"
	"github.com/nacos-group/nacos-sdk-go/v2/clients/naming_client"
	"github.com/nacos-group/nacos-sdk-go/v2/common/constant"
	"github.com/nacos-group/nacos-sdk-go/v2/common/logger"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
)

// Server is one Nacos server as a client is given it.
type Server struct {
	HTTPAddr string // host:port of the HTTP API (what Nacos users write as the server address)
	GRPCAddr string // host:port of the gRPC API; "" : the HTTP port + 1000, as the client assumes
}

// Options configure a client.
type Options struct {
	Servers []Server
	// Namespace is the Nacos namespace (tenant) ID the client registers in; "" is public.
	Namespace string
	// Dir holds the client's log and cache directories (required: a test's t.TempDir()).
	Dir string
	// Username and Password: Nacos auth (a login per server, the token refreshed by the client).
	Username, Password string
	// AccessKey and SecretKey: Nacos AK/SK request signing.
	AccessKey, SecretKey string
	// Timeout bounds every request (default 5 s).
	Timeout time.Duration
	// Logf, when set, receives the client's warnings and errors (its info and debug lines are
	// dropped). It must be safe to call after the test ends (the client logs from goroutines of
	// its own until Close returns).
	Logf func(format string, args ...any)
}

// Client is the official client's naming API.
type Client struct {
	naming    naming_client.INamingClient
	namespace string
	closeOnce sync.Once
}

// Instance is an instance as the client registers it (vo.RegisterInstanceParam's fields).
type Instance struct {
	IP        string
	Port      uint64
	Weight    float64 // 0 means 1, the client's default
	Disabled  bool    // enabled=false: the instance is kept but must not be called
	Unhealthy bool    // healthy=false
	Cluster   string  // "" : DEFAULT
	Metadata  map[string]string
	// Persistent instances are not tied to the client's connection (Ephemeral=false).
	Persistent bool
}

// Open builds a client and connects it (the SDK connects in the constructor).
func Open(opts Options) (*Client, error) {
	if len(opts.Servers) == 0 {
		return nil, errors.New("nacosclient: no server")
	}
	if opts.Dir == "" {
		return nil, errors.New("nacosclient: Options.Dir is required (the client writes its log and cache there)")
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	var servers []constant.ServerConfig
	for _, s := range opts.Servers {
		host, port, err := splitPort(s.HTTPAddr)
		if err != nil {
			return nil, fmt.Errorf("nacosclient: server %q: %w", s.HTTPAddr, err)
		}
		sc := constant.ServerConfig{IpAddr: host, Port: port, Scheme: "http", ContextPath: "/nacos"}
		if s.GRPCAddr != "" {
			_, gport, err := splitPort(s.GRPCAddr)
			if err != nil {
				return nil, fmt.Errorf("nacosclient: gRPC address %q: %w", s.GRPCAddr, err)
			}
			sc.GrpcPort = gport
		}
		servers = append(servers, sc)
	}
	logDir, cacheDir := filepath.Join(opts.Dir, "log"), filepath.Join(opts.Dir, "cache")
	for _, d := range []string{logDir, cacheDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	cc := constant.ClientConfig{
		NamespaceId:         opts.Namespace,
		TimeoutMs:           uint64(timeout / time.Millisecond),
		BeatInterval:        5000,
		NotLoadCacheAtStart: true,
		DisableUseSnapShot:  true,
		LogDir:              logDir,
		CacheDir:            cacheDir,
		LogLevel:            "warn",
		Username:            opts.Username,
		Password:            opts.Password,
		AccessKey:           opts.AccessKey,
		SecretKey:           opts.SecretKey,
		AppName:             "galleon-test",
	}
	naming, err := clients.NewNamingClient(vo.NacosClientParam{ClientConfig: &cc, ServerConfigs: servers})
	// The constructor installed a file logger for the whole process; the test's is quieter.
	logger.SetLogger(quietLogger{logf: opts.Logf})
	if err != nil {
		if naming != nil {
			naming.CloseClient()
		}
		return nil, fmt.Errorf("nacosclient: %w", err)
	}
	return &Client{naming: naming, namespace: opts.Namespace}, nil
}

// New is Open for a test: the client is closed when the test ends, and its directory is
// t.TempDir() unless opts.Dir is set.
func New(t testing.TB, opts Options) *Client {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	c, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// Naming is the SDK's client itself, for what the wrappers below do not cover.
func (c *Client) Naming() naming_client.INamingClient { return c.naming }

// Close closes the client's connection (the server then drops its ephemeral instances).
// Idempotent.
func (c *Client) Close() { c.closeOnce.Do(c.naming.CloseClient) }

// refusals is how often Register and Update try a registration the server refuses (answers
// unsuccessful, the SDK returning false without an error), and refusalPause the pause between
// tries. polaris-server refuses about one first registration in three or four of a service
// (or namespace) that does not exist yet (it creates them on the fly: service/instance.go,
// createServiceIfAbsent) and accepts the same request a moment later; the SDK retries only
// after a reconnect (its redo), so an application would call again.
const (
	refusals     = 5
	refusalPause = 300 * time.Millisecond
)

// Register registers in as an instance of service in group ("" : DEFAULT_GROUP).
func (c *Client) Register(group, service string, in Instance) error {
	return c.retry("registering", group, service, in, func() (bool, error) {
		return c.naming.RegisterInstance(vo.RegisterInstanceParam{
			Ip: in.IP, Port: in.Port, Weight: weight(in.Weight), Enable: !in.Disabled, Healthy: !in.Unhealthy,
			Metadata: in.Metadata, ClusterName: in.Cluster, ServiceName: service, GroupName: group, Ephemeral: !in.Persistent,
		})
	})
}

// Update re-registers in with its new weight, enabled flag or metadata (UpdateInstance: over
// gRPC the client sends a registerInstance request again).
func (c *Client) Update(group, service string, in Instance) error {
	return c.retry("updating", group, service, in, func() (bool, error) {
		return c.naming.UpdateInstance(vo.UpdateInstanceParam{
			Ip: in.IP, Port: in.Port, Weight: weight(in.Weight), Enable: !in.Disabled, Healthy: !in.Unhealthy,
			Metadata: in.Metadata, ClusterName: in.Cluster, ServiceName: service, GroupName: group, Ephemeral: !in.Persistent,
		})
	})
}

// retry makes call until the server accepts it, it fails with an error (unreachable, timed
// out: not retried, the SDK has its own timeout), or refusals tries were refused.
func (c *Client) retry(what, group, service string, in Instance, call func() (bool, error)) error {
	for try := 1; ; try++ {
		ok, err := call()
		if err != nil || ok || try == refusals {
			if !ok && err == nil {
				return fmt.Errorf("%s %s:%d of %s@@%s: the server refused it %d times", what, in.IP, in.Port, group, service, try)
			}
			return result(what, group, service, in, ok, err)
		}
		time.Sleep(refusalPause)
	}
}

// Deregister deregisters in.
func (c *Client) Deregister(group, service string, in Instance) error {
	ok, err := c.naming.DeregisterInstance(vo.DeregisterInstanceParam{
		Ip: in.IP, Port: in.Port, Cluster: in.Cluster, ServiceName: service, GroupName: group, Ephemeral: !in.Persistent,
	})
	return result("deregistering", group, service, in, ok, err)
}

func weight(w float64) float64 {
	if w == 0 {
		return 1
	}
	return w
}

func result(what, group, service string, in Instance, ok bool, err error) error {
	if err != nil {
		return fmt.Errorf("%s %s:%d of %s@@%s: %w", what, in.IP, in.Port, group, service, err)
	}
	if !ok {
		return fmt.Errorf("%s %s:%d of %s@@%s: the server did not confirm it", what, in.IP, in.Port, group, service)
	}
	return nil
}

func splitPort(addr string) (string, uint64, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return host, port, nil
}

// quietLogger drops the client's info and debug lines and hands warnings and errors to logf.
type quietLogger struct{ logf func(string, ...any) }

func (l quietLogger) Info(...any)           {}
func (l quietLogger) Debug(...any)          {}
func (l quietLogger) Infof(string, ...any)  {}
func (l quietLogger) Debugf(string, ...any) {}
func (l quietLogger) Warn(args ...any)      { l.out("nacos-sdk-go warn: " + fmt.Sprint(args...)) }
func (l quietLogger) Error(args ...any)     { l.out("nacos-sdk-go error: " + fmt.Sprint(args...)) }
func (l quietLogger) Warnf(f string, args ...any) {
	l.out("nacos-sdk-go warn: " + fmt.Sprintf(f, args...))
}
func (l quietLogger) Errorf(f string, args ...any) {
	l.out("nacos-sdk-go error: " + fmt.Sprintf(f, args...))
}

func (l quietLogger) out(line string) {
	if l.logf != nil {
		l.logf("%s", line)
	}
}

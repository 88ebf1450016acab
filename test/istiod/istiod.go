// Package istiod runs a real Istio control plane (pilot-discovery, 1.29.2 by default) for
// Galleon's tests. Tests that should hold for every supported istiod run per release with
// ForEachRelease; GALLEON_ISTIOD_RELEASES chooses the releases (docs/istiod-releases.md).
//
// istiod runs without Kubernetes: `--registries=` and a mesh config whose configSources point at
// the MCP-over-xDS servers under test. The binary is built once by `make istiod` and
// cached outside the repository; a missing binary fails the test (it never skips silently).
//
//	src := startGalleon(t)                                   // must be listening first:
//	ist := istiod.Start(t, istiod.Options{ConfigSources: []string{src.Addr}})
//	before, _ := ist.PushCounters(ctx)
//	... change the registry ...
//	err := ist.WaitFor(ctx, func() (bool, error) { ... ist.ConfigsOfKind(ctx, "ServiceEntry") ... })
//	after, _ := ist.WaitPushed(ctx, before)                  // after.FullPushes vs before.FullPushes
//
// istiod exits at start when an xds:// source is unreachable, so start the source first.
package istiod

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/test/internal/proc"
)

const (
	// Version is the default Istio release the harness runs (toolcache.DefaultIstiodRelease).
	Version = toolcache.DefaultIstiodRelease
	// EnvBinary overrides the pilot-discovery binary (default: the tool cache's).
	EnvBinary = "GALLEON_PILOT_DISCOVERY"

	defaultStartTimeout = 60 * time.Second
	startAttempts       = 3
)

// Options configures one istiod.
type Options struct {
	// ConfigSources are the MCP-over-xDS servers istiod reads config from, as host:port
	// ("127.0.0.1:15010"); "xds://" is added unless the address already has a scheme
	// (so "k8s://" or "fs:///dir" sources can be passed as-is).
	ConfigSources []string
	// SourceTLS gives a config source (keyed by its ConfigSources entry) TLS settings: istiod
	// 1.29 dials xds:// sources in SIMPLE mode only (pilot/pkg/bootstrap/configcontroller.go,
	// getTransportCredentials).
	SourceTLS map[string]SourceTLS
	// MeshConfig is extra MeshConfig YAML (top-level keys) appended to the generated mesh.yaml.
	MeshConfig string
	// Env adds KEY=VALUE entries to istiod's environment (e.g. "PILOT_DEBOUNCE_AFTER=10ms").
	Env []string
	// Args adds command-line flags (e.g. "--log_output_level=default:info,adsc:debug").
	Args []string
	// Release is the istiod to run (ForEachRelease hands one out); zero means Version, from
	// $GALLEON_PILOT_DISCOVERY or the tool cache's.
	Release Release
	// StartTimeout bounds the start-up wait (default 60s).
	StartTimeout time.Duration
	// Kubeconfig turns istiod's Kubernetes side on: it reads that API server (a test/kube
	// Cluster's), with the Kubernetes service registry (--registries=Kubernetes). Add "k8s://"
	// to ConfigSources for Istio resources stored there too. Releases that cannot start without
	// Kubernetes (Release.NeedsKubernetes) get a new cluster of their own when this is empty
	// (KubeconfigFor).
	Kubeconfig string
	// NoWaitSynced makes Start return as soon as the monitoring port answers, instead of waiting
	// until istiod has synced every config source (its gRPC port only opens after that). Use it to
	// test sources that never complete the initial sync.
	NoWaitSynced bool
	// Dir is istiod's working directory, with its mesh config and log. Start uses t.TempDir()
	// when empty; StartServer a new temporary directory.
	Dir string
	// Logf, if set, is told where istiod runs and of a kill after SIGTERM (Start: the test log).
	Logf func(format string, args ...any)
	// Detach detaches istiod's process from the program (serverproc.Detach; a test's process
	// when zero).
	Detach serverproc.Detach
}

// Istiod is a running pilot-discovery process. The embedded proc.Process gives Stop, Exited,
// Log, LogContains, LogOffset, LogSince and Signal.
type Istiod struct {
	*proc.Process
	Release        Release
	MeshConfigPath string
	GRPCAddr       string // plain-text xDS for proxies; opens once every config source has synced
	HTTPAddr       string // /ready (stays 503 without Kubernetes), debug
	MonitoringAddr string // /metrics, /debug/*

	client *http.Client
	// pushLog is how far nonEndpointPushes has read the log, and what it counted there.
	pushLog struct {
		mu     sync.Mutex
		offset int64
		count  int
	}
}

// Start runs istiod and waits until it serves (by default: until it has synced its config
// sources). It is stopped in t.Cleanup, and the tail of its log is written to the test log if the
// test failed. It is StartServer for a test, which also starts a Kubernetes API server for a
// release that needs one (KubeconfigFor).
func Start(t testing.TB, opts Options) *Istiod {
	t.Helper()
	opts = forTest(t, opts)
	ist, err := StartServer(t.Context(), opts)
	if err != nil {
		t.Fatalf("istiod did not start: %v", err)
	}
	t.Cleanup(func() {
		ist.Stop()
		if t.Failed() {
			t.Logf("%s (pid %d) %s", ist.Name, ist.Pid(), ist.Tail(ist.TailLines))
		}
	})
	return ist
}

// StartServer is Start for a program that is not a test: it runs istiod in Options.Dir (a new
// temporary directory when empty) and waits until it serves, or returns why not, with the tail of
// its log. Free ports are found by binding :0 and closing, which can race with other processes:
// it retries when istiod reports the address in use. A release that needs Kubernetes
// (Release.NeedsKubernetes) needs Options.Kubeconfig. Stop (or Close) stops it.
func StartServer(ctx context.Context, opts Options) (*Istiod, error) {
	rel, err := opts.release()
	if err != nil {
		return nil, err
	}
	if err := opts.check(rel); err != nil {
		return nil, err
	}
	meshPath, networksPath, err := writeMeshFiles(&opts)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		ist, err := start(ctx, rel, meshPath, networksPath, opts, attempt)
		if err == nil {
			return ist, nil
		}
		lastErr = err
		if ctx.Err() != nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, lastErr
}

// Close stops istiod (Stop), for a program that is not a test.
func (i *Istiod) Close() error {
	i.Stop()
	return nil
}

// StartRefused runs istiod with opts and expects it to give up before it serves: istiod exits
// when a config source fails its first connection (a TLS source it cannot verify). It returns
// why, with the tail of istiod's log; the test fails if istiod serves instead.
func StartRefused(t testing.TB, opts Options) string {
	t.Helper()
	opts = forTest(t, opts)
	ist, err := StartServer(t.Context(), opts)
	if err == nil {
		ist.Stop()
		t.Fatalf("istiod started and synced its config sources; want it refused (mesh config %s)", ist.MeshConfigPath)
		return ""
	}
	if strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("istiod did not start %d times: address already in use", startAttempts)
	}
	return err.Error()
}

// forTest fills in what a test's istiod takes from the test: the release (failing the test when
// it cannot be resolved), a Kubernetes API server for a release that needs one, the directory and
// the log.
func forTest(t testing.TB, opts Options) Options {
	t.Helper()
	rel, err := opts.release()
	if err != nil {
		t.Fatal(err)
	}
	opts.Release = rel
	if opts.Kubeconfig == "" && len(opts.ConfigSources) > 0 { // none: StartServer says so
		opts.Kubeconfig = KubeconfigFor(t, rel)
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	return opts
}

// release is Options.Release, or Version from $GALLEON_PILOT_DISCOVERY or the cache.
func (o Options) release() (Release, error) {
	if o.Release.Binary != "" {
		return o.Release, nil
	}
	rels, err := resolveReleases(Version, os.Getenv(EnvBinary), toolcache.Bin)
	if err != nil {
		return Release{}, err
	}
	return rels[0], nil
}

// check refuses options istiod rel cannot start with.
func (o Options) check(rel Release) error {
	if len(o.ConfigSources) == 0 {
		return errors.New("istiod.Start: Options.ConfigSources is empty (without a source istiod falls back to Kubernetes)")
	}
	if o.Kubeconfig == "" && rel.NeedsKubernetes() {
		return fmt.Errorf("istiod %s cannot start without Kubernetes: set Options.Kubeconfig (see KubeconfigFor)", rel.Name)
	}
	return nil
}

// writeMeshFiles writes the mesh and networks files into opts.Dir, made first (a new temporary
// directory when empty).
func writeMeshFiles(opts *Options) (meshPath, networksPath string, err error) {
	if opts.Dir == "" {
		if opts.Dir, err = os.MkdirTemp("", "istiod-"); err != nil {
			return "", "", fmt.Errorf("istiod: %w", err)
		}
	} else if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return "", "", fmt.Errorf("istiod: %w", err)
	}
	meshPath = filepath.Join(opts.Dir, "mesh.yaml")
	if err := os.WriteFile(meshPath, []byte(meshConfigYAML(*opts)), 0o644); err != nil {
		return "", "", fmt.Errorf("istiod: %w", err)
	}
	// An empty file is a valid (empty) MeshNetworks.
	networksPath = filepath.Join(opts.Dir, "networks.yaml")
	if err := os.WriteFile(networksPath, nil, 0o644); err != nil {
		return "", "", fmt.Errorf("istiod: %w", err)
	}
	return meshPath, networksPath, nil
}

// SourceTLS is a config source's tlsSettings (networking.v1alpha3.ClientTLSSettings, mode
// SIMPLE) as istiod reads it for an xds:// source.
type SourceTLS struct {
	// CACertificates is the CA bundle itself, PEM: istiod parses the field's content, not a
	// file it names (unlike a DestinationRule's).
	CACertificates string
	// SNI is the server name sent and verified (default: the address's host).
	SNI string
	// SubjectAltNames: the server certificate must hold one of them as a DNS SAN.
	SubjectAltNames []string
}

func meshConfigYAML(opts Options) string {
	var b strings.Builder
	b.WriteString("# generated by github.com/galleon-mesh/galleon/test/istiod\nconfigSources:\n")
	for i, a := range opts.ConfigSources {
		if !strings.Contains(a, "://") {
			a = "xds://" + a
		}
		fmt.Fprintf(&b, "- address: %q\n", a)
		src := opts.ConfigSources[i]
		if st, ok := opts.SourceTLS[src]; ok {
			b.WriteString("  tlsSettings:\n    mode: SIMPLE\n")
			if st.CACertificates != "" {
				fmt.Fprintf(&b, "    caCertificates: %q\n", st.CACertificates)
			}
			if st.SNI != "" {
				fmt.Fprintf(&b, "    sni: %q\n", st.SNI)
			}
			for j, san := range st.SubjectAltNames {
				if j == 0 {
					b.WriteString("    subjectAltNames:\n")
				}
				fmt.Fprintf(&b, "    - %q\n", san)
			}
		}
	}
	if opts.MeshConfig != "" {
		b.WriteString(opts.MeshConfig)
		if !strings.HasSuffix(opts.MeshConfig, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

func start(ctx context.Context, rel Release, meshPath, networksPath string, opts Options, attempt int) (*Istiod, error) {
	addrs, err := proc.FreeAddrs(3)
	if err != nil {
		return nil, err
	}
	ist := &Istiod{
		Release:        rel,
		MeshConfigPath: meshPath,
		GRPCAddr:       addrs[0],
		HTTPAddr:       addrs[1],
		MonitoringAddr: addrs[2],
		client:         &http.Client{Timeout: 10 * time.Second},
	}
	args := []string{"discovery", "--registries="} // no Kubernetes (and no Mock) service registry
	if opts.Kubeconfig != "" {
		args = []string{"discovery", "--registries=Kubernetes", "--kubeconfig=" + opts.Kubeconfig}
	}
	args = append(args,
		"--meshConfig="+meshPath,
		"--networksConfig="+networksPath,
		"--grpcAddr="+ist.GRPCAddr,
		"--httpAddr="+ist.HTTPAddr,
		"--httpsAddr=", // no webhook server: webhooks are multiplexed on httpAddr
		"--secureGRPCAddr=",
		"--monitoringAddr="+ist.MonitoringAddr,
		// Port 0 does NOT disable ControlZ (pkg/ctrlz/ctrlz.go Run: net.Listen("addr:0")): it
		// binds a random port, which is what parallel tests need.
		"--ctrlz_port=0",
		"--ctrlz_address=127.0.0.1",
		"--shutdownDuration=1s", // SIGTERM -> exit in about 1.1s
	)
	if rel.PushContextEveryPush() {
		// FullPushes counts these debug lines (see there); Args may still override.
		args = append(args, "--log_output_level=default:info,push:debug")
	}
	args = append(args, opts.Args...)
	name := "istiod"
	if attempt > 1 {
		name = fmt.Sprintf("istiod.%d", attempt)
	}
	p, err := proc.Launch(proc.Config{
		Name: name,
		Path: rel.Binary,
		Args: args,
		// istiod writes nothing relative to its working directory today; keep any such writes
		// out of the repository anyway.
		Dir: opts.Dir,
		// Without these istiod would try a real cluster. Nothing else is needed to run without
		// Kubernetes: it uses an in-memory self-signed CA ("Use local self-signed CA certificate
		// for testing" warning) and POD_NAMESPACE defaults to istio-system.
		Env:    proc.Env(nil, []string{"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}, nil, opts.Env...),
		Logf:   opts.Logf,
		Detach: opts.Detach,
	})
	if err != nil {
		return nil, err
	}
	ist.Process = p

	ctx, cancel := context.WithTimeout(ctx, cmp.Or(opts.StartTimeout, defaultStartTimeout))
	defer cancel()
	err = ist.WaitFor(ctx, func() (bool, error) {
		if err := ist.get(ctx, "/debug/configz", io.Discard); err != nil {
			return false, err
		}
		if opts.NoWaitSynced {
			return true, nil
		}
		// The plain gRPC port only opens after every config source has synced
		// (pilot/pkg/bootstrap/server.go:460 Start: waitForCacheSync at :471, then
		// net.Listen(grpcAddress) at :493); /ready stays 503 without Kubernetes.
		if err := proc.DialOK(ist.GRPCAddr); err != nil {
			return false, fmt.Errorf("config sources not synced yet (gRPC port closed): %w", err)
		}
		return true, nil
	})
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("%w\n%s", err, p.Tail(40))
	}
	if opts.Logf != nil {
		opts.Logf("istiod %s running: pid %d, monitoring http://%s, xDS %s, log %s",
			rel.Name, p.Pid(), ist.MonitoringAddr, ist.GRPCAddr, p.LogPath)
	}
	return ist, nil
}

// WaitFor polls cond until it returns true, ctx ends (default deadline 30s when ctx has none),
// or istiod exits. Errors from cond count as "not yet"; the last one is reported.
func (i *Istiod) WaitFor(ctx context.Context, cond func() (bool, error)) error {
	return i.Process.WaitFor(ctx, cond)
}

// WaitFor polls cond (every 10ms, backing off to 250ms) until it returns true or ctx ends;
// without a deadline on ctx it gives up after 30s. Errors from cond count as "not yet" and the
// last one is included in the timeout error. Istiod.WaitFor also stops when istiod exits.
func WaitFor(ctx context.Context, cond func() (bool, error)) error {
	return proc.WaitFor(ctx, cond)
}

func (i *Istiod) get(ctx context.Context, path string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+i.MonitoringAddr+path, nil)
	if err != nil {
		return err
	}
	resp, err := i.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// Get fetches a path (e.g. "/debug/syncz") from the monitoring port.
func (i *Istiod) Get(ctx context.Context, path string) ([]byte, error) {
	var buf bytes.Buffer
	err := i.get(ctx, path, &buf)
	return buf.Bytes(), err
}

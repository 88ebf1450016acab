// Package grpcwriter writes instances to a Nacos server over its 2.x gRPC API, as a Nacos 2
// client registers them: ephemeral, an InstanceRequest each, bound to the connection that sent
// it, with no heartbeat; the server keeps them while the connection lives and drops them when it
// ends. It is the adapter's own client (adapters/nacos/internal/wire: the payload codec, the
// connection setup, the health checks every 5 s) with the writes the adapter never makes, for
// tests and the load generator.
//
// It is a package of its own, not part of nacostest, because wire's tests use nacostest: were
// nacostest to import wire, they could not.
package grpcwriter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/internal/wire"
	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
)

// Config says where and how a Writer connects.
type Config struct {
	// Address is the server's gRPC address, host:port (its HTTP port + 1000).
	Address string
	// Timeout bounds each request and the connection's setup; 0 is nacostest.RequestTimeout.
	// A loaded Polaris takes seconds to store a registration.
	Timeout time.Duration
	// ClientVersion is sent in ConnectionSetupRequest; "" is "Galleon-test:v1".
	ClientVersion string
}

// Writer is one connection to a Nacos server's gRPC API and the instances it registered. It is
// safe for concurrent use.
type Writer struct {
	addr string
	conn *wire.Conn
}

// Dial connects to cfg.Address and sets the connection up as Nacos's clients do; ctx bounds
// Dial only. Close ends the connection, and with it the instances it registered.
func Dial(ctx context.Context, cfg Config) (*Writer, error) {
	if _, _, err := net.SplitHostPort(cfg.Address); err != nil {
		return nil, fmt.Errorf("grpcwriter: address %q: want the server's gRPC address, host:port: %w", cfg.Address, err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = nacostest.RequestTimeout
	}
	if cfg.ClientVersion == "" {
		cfg.ClientVersion = "Galleon-test:v1"
	}
	conn, err := wire.Dial(ctx, wire.DialConfig{Address: cfg.Address, Timeout: cfg.Timeout, ClientVersion: cfg.ClientVersion})
	if err != nil {
		return nil, fmt.Errorf("grpcwriter: %s: %w", cfg.Address, err)
	}
	return &Writer{addr: cfg.Address, conn: conn}, nil
}

// Register registers in as an ephemeral instance of ref (whatever in.Ephemeral says): a new
// one, or over the one at the same IP, port and cluster, every field replaced.
func (w *Writer) Register(ctx context.Context, ref nacostest.Ref, in nacostest.Instance) error {
	if err := w.conn.RegisterInstance(ctx, wireRef(ref), wireInstance(in)); err != nil {
		return fmt.Errorf("grpcwriter: registering %s %s:%d: %w", name(ref), in.IP, in.Port, err)
	}
	return nil
}

// Deregister removes the instance of ref at in's IP, port and cluster.
func (w *Writer) Deregister(ctx context.Context, ref nacostest.Ref, in nacostest.Instance) error {
	if err := w.conn.DeregisterInstance(ctx, wireRef(ref), wireInstance(in)); err != nil {
		return fmt.Errorf("grpcwriter: deregistering %s %s:%d: %w", name(ref), in.IP, in.Port, err)
	}
	return nil
}

// Done is closed when the connection is lost or closed: the server no longer holds its
// instances.
func (w *Writer) Done() <-chan struct{} { return w.conn.Done() }

// Err says why Done is closed; nil before.
func (w *Writer) Err() error {
	if err := w.conn.Err(); err != nil && !errors.Is(err, wire.ErrClosed) {
		return fmt.Errorf("grpcwriter: the connection to %s: %w", w.addr, err)
	}
	return w.conn.Err()
}

// Close ends the connection and waits for its goroutines; the server then drops the
// instances it registered. It is idempotent.
func (w *Writer) Close() error { return w.conn.Close() }

func wireRef(r nacostest.Ref) wire.Ref {
	return wire.Ref{Namespace: r.Namespace, Group: r.Group, Service: r.Service}
}

func wireInstance(in nacostest.Instance) wire.Instance {
	cluster := in.Cluster
	if cluster == "" {
		cluster = nacostest.DefaultCluster
	}
	return wire.Instance{
		IP: in.IP, Port: in.Port, Weight: in.Weight, Healthy: in.Healthy, Enabled: in.Enabled,
		ClusterName: cluster, Metadata: in.Metadata,
	}
}

// name is ref as errors name it, namespace/group/service with Nacos's defaults.
func name(r nacostest.Ref) string {
	ns, group := r.Namespace, r.Group
	if ns == "" {
		ns = nacostest.DefaultNamespace
	}
	if group == "" {
		group = nacostest.DefaultGroup
	}
	return ns + "/" + group + "/" + r.Service
}

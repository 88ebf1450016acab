package loadgen

// What the generator and a run need of a Nacos server's two APIs: the 2.x gRPC API registers
// instances (nacostest/grpcwriter, over the adapter's own client), the 1.x HTTP OpenAPI lists
// them (nacostest.Client).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest/grpcwriter"
)

// nacosRequestTimeout bounds one request of the generator or a run (a registration takes
// seconds when Polaris is loaded).
const nacosRequestTimeout = 30 * time.Second

// dialNacos connects to the gRPC API at addr (host:port, the HTTP port + 1000); the instances
// it registers live as long as the connection (Close ends it).
func dialNacos(ctx context.Context, addr string) (*grpcwriter.Writer, error) {
	w, err := grpcwriter.Dial(ctx, grpcwriter.Config{Address: addr, Timeout: nacosRequestTimeout, ClientVersion: "Galleon-load:v1"})
	if err != nil {
		return nil, fmt.Errorf("--nacos-grpc %s: %w", addr, err)
	}
	return w, nil
}

// nacosHTTP reads a Nacos server's 1.x HTTP OpenAPI.
type nacosHTTP struct {
	*nacostest.Client
	hc *http.Client
}

// newNacosHTTP checks server (host:port, what Nacos clients call the server address) and
// returns a reader of its HTTP API keeping up to conns connections.
func newNacosHTTP(server string, conns int) (*nacosHTTP, error) {
	if server == "" {
		return nil, errors.New("--nacos-server is empty: give the Nacos server's HTTP address, host:port (e.g. 127.0.0.1:8848)")
	}
	if _, _, err := net.SplitHostPort(server); err != nil {
		return nil, fmt.Errorf("--nacos-server %q: want the server's HTTP address, host:port: %w", server, err)
	}
	hc := pooledHTTPClient(conns, nacosRequestTimeout)
	return &nacosHTTP{Client: nacostest.NewClient("http://"+server, "", hc), hc: hc}, nil
}

func (c *nacosHTTP) Close() { c.hc.CloseIdleConnections() }

// instances lists ref's instances, unhealthy ones too (no UDP push asked for).
func (c *nacosHTTP) instances(ctx context.Context, ref nacostest.Ref) ([]nacostest.InstanceInfo, error) {
	si, err := c.Instances(ctx, ref)
	if err != nil {
		return nil, err
	}
	return si.Hosts, nil
}

// grpcAddrOf is the gRPC address Nacos's clients derive from an HTTP one: its port + 1000.
func grpcAddrOf(server string) (string, error) {
	host, port, err := net.SplitHostPort(server)
	if err != nil {
		return "", fmt.Errorf("--nacos-server %q: want host:port: %w", server, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p+1000 > 65535 {
		return "", fmt.Errorf("--nacos-server %q: its port + 1000 (the gRPC port) is not a port", server)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1000)), nil
}

package loadtest

// Shared by the Go benchmarks of the core (internal/serve/xds, internal/serve/mcp): the data
// set Galleon is held to and the environment serving it. Results and how to
// read them: docs/benchmarks.md.

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/galleon-mesh/galleon/internal/pipeline"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/model"
)

// The benchmark scale: services x instances, and connected sinks. The
// services and sinks are the defaults of BenchScaleFromEnv; the instances
// per service are fixed.
const (
	DefaultBenchServices = 10000
	BenchInstances       = 10
	DefaultBenchSinks    = 10
)

// The environment variables that change the benchmark scale (see
// BenchScaleFromEnv), so that `galleon-bench scale` (bench/) can run the same
// benchmarks at other sizes.
const (
	BenchServicesEnv = "GALLEON_BENCH_SERVICES"
	BenchSinksEnv    = "GALLEON_BENCH_SINKS"
)

// MaxBenchServices is the most services BenchService can address: service i
// lives in 10.<i/250>.<i%250>.0/24, and 10.251.0.0/16 is where changed
// instances move, so i/250 must stay at or below 250.
const MaxBenchServices = 251 * 250

// BenchScale is the size of a benchmark run: Services x BenchInstances
// served, Sinks connected.
type BenchScale struct {
	Services int
	Sinks    int
}

// BenchScaleFromEnv returns the benchmark scale: GALLEON_BENCH_SERVICES
// services (default DefaultBenchServices, 1 to MaxBenchServices) and
// GALLEON_BENCH_SINKS sinks (default DefaultBenchSinks, at least 1). The
// error names the variable and what it takes.
func BenchScaleFromEnv() (BenchScale, error) {
	services, err := benchEnvInt(BenchServicesEnv, DefaultBenchServices, MaxBenchServices)
	if err != nil {
		return BenchScale{}, err
	}
	// No upper bound: each sink is one loopback connection, and what a
	// machine can hold is for whoever sets it to find out.
	sinks, err := benchEnvInt(BenchSinksEnv, DefaultBenchSinks, math.MaxInt)
	if err != nil {
		return BenchScale{}, err
	}
	return BenchScale{Services: services, Sinks: sinks}, nil
}

// benchEnvInt reads name as an integer from 1 to most, def when unset or empty.
func benchEnvInt(name string, def, most int) (int, error) {
	raw := os.Getenv(name)
	if raw == "" {
		return def, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(raw))
	if err != nil || n < 1 || n > most {
		limit := "a whole number of at least 1"
		if most != math.MaxInt {
			limit = fmt.Sprintf("a whole number from 1 to %d", most)
		}
		return 0, fmt.Errorf("%s=%q: set it to %s, or unset it for the default %d", name, raw, limit, def)
	}
	return n, nil
}

// BenchService is service i of the benchmark data set (0 <= i <
// MaxBenchServices). Every variant > 0 moves the first instance somewhere
// new, so replacing variant v with another is one endpoint-only update of
// one ServiceEntry.
func BenchService(i int, variant int) model.Service {
	s := model.Service{
		Namespace: "bench", Name: fmt.Sprintf("svc-%05d", i),
		Hosts:  []string{fmt.Sprintf("svc-%05d.bench.internal", i)},
		Ports:  []model.Port{{Number: 8080, Protocol: model.ProtocolHTTP}},
		Labels: map[string]string{"app": fmt.Sprintf("svc-%05d", i)},
	}
	for j := range BenchInstances {
		s.Instances = append(s.Instances, model.Instance{
			ID:       fmt.Sprintf("svc-%05d-%d", i, j),
			Address:  fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1),
			Labels:   map[string]string{"app": fmt.Sprintf("svc-%05d", i), "version": "v1"},
			Locality: "us-east1/us-east1-b",
		})
	}
	if variant > 0 {
		s.Instances[0].Address = fmt.Sprintf("10.251.%d.%d", variant/250%250, variant%250)
	}
	return s
}

// BenchEnv is a pipeline and store holding the full benchmark data set,
// served by a gRPC server on a loopback port.
type BenchEnv struct {
	Pipe  *pipeline.Pipeline
	Store *snapshot.Store
	Addr  string
	// Services is how many services are served, each BenchService(i, 0)
	// for i below it.
	Services int
	// Listed is how long the listing took to be converted and applied.
	Listed time.Duration

	stop func()
}

// StartBenchEnv lists services x BenchInstances (services at most
// MaxBenchServices) into a new pipeline (quiet period 50 µs, max delay
// 1 ms), waits for the store to be ready and serves it on a gRPC server made
// with opts, on which register registers the servers under test. Close
// stops everything.
func StartBenchEnv(services int, opts []grpc.ServerOption, register func(*grpc.Server, *snapshot.Store)) (*BenchEnv, error) {
	if services < 1 || services > MaxBenchServices {
		return nil, fmt.Errorf("benchmark of %d services: want 1 to %d", services, MaxBenchServices)
	}
	store := snapshot.NewStore()
	pipe := pipeline.New(store, pipeline.Config{Quiet: 50 * time.Microsecond, MaxDelay: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = pipe.Run(ctx); close(done) }()
	stopPipe := func() { cancel(); <-done }

	listing := make([]model.Service, services)
	for i := range listing {
		listing[i] = BenchService(i, 0)
	}
	start := time.Now()
	changed, unsubscribe := store.Subscribe()
	pipe.Replace(listing)
	for !store.Current().Ready {
		select { // readiness arrives with the listing; the timer is a backstop
		case <-changed:
		case <-time.After(10 * time.Millisecond):
		}
	}
	unsubscribe()
	listed := time.Since(start)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		stopPipe()
		return nil, err
	}
	g := grpc.NewServer(opts...)
	register(g, store)
	go func() { _ = g.Serve(lis) }()
	return &BenchEnv{Pipe: pipe, Store: store, Addr: lis.Addr().String(), Services: services, Listed: listed,
		stop: func() { g.Stop(); stopPipe() }}, nil
}

// Close stops the server and the pipeline.
func (e *BenchEnv) Close() { e.stop() }

// Apply reports svc to the pipeline and returns when it was reported and
// the snapshot that resulted. It waits on a store subscription, not by
// spinning: a spinning waiter would take one of the cores from the path
// being measured.
func (e *BenchEnv) Apply(svc model.Service) (start time.Time, snap *snapshot.Snapshot) {
	before := e.Store.Current().Seq
	changed, unsubscribe := e.Store.Subscribe()
	defer unsubscribe()
	start = time.Now()
	e.Pipe.Update(svc)
	snap = e.Store.Current()
	for snap.Seq == before {
		<-changed
		snap = e.Store.Current()
	}
	return start, snap
}

// WaitAll returns when every sink holds version: the last arrival's time
// and the last sink's arrival.
func WaitAll(ctx context.Context, sinks []*Sink, version string) (last time.Time, a Arrival, err error) {
	for _, s := range sinks {
		a, err = s.Wait(ctx, version)
		if err != nil {
			return last, a, fmt.Errorf("waiting for version %s: %w", version, err)
		}
		if a.At.After(last) {
			last = a.At
		}
	}
	return last, a, nil
}

// Percentile returns the p-th percentile of sorted.
func Percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p+99)/100 - 1
	return sorted[max(i, 0)]
}

// RSSMB reads this process's resident set size in MiB, the figure an
// operator sees; 0 when unknown.
func RSSMB() float64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

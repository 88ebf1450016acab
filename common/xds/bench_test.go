package xds_test

// Benchmarks of the core at the scale Galleon is held to: 10,000 services x
// 10 instances, 10 connected sinks, over real gRPC on loopback. Results and
// how to read them: docs/benchmarks.md.

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/galleon-mesh/galleon/common/loadtest"
	"github.com/galleon-mesh/galleon/common/model"
	"github.com/galleon-mesh/galleon/common/pipeline"
	"github.com/galleon-mesh/galleon/common/snapshot"
	"github.com/galleon-mesh/galleon/common/xds"
)

const (
	benchServices  = 10000
	benchInstances = 10
	benchSinks     = 10
	benchType      = "networking.istio.io/v1/ServiceEntry"
)

func benchService(i int, variant int) model.Service {
	s := model.Service{
		Registry: "bench", Namespace: "bench", Name: fmt.Sprintf("svc-%05d", i),
		Hosts:  []string{fmt.Sprintf("svc-%05d.bench.internal", i)},
		Ports:  []model.Port{{Number: 8080, Protocol: model.ProtocolHTTP}},
		Labels: map[string]string{"app": fmt.Sprintf("svc-%05d", i)},
	}
	for j := range benchInstances {
		s.Instances = append(s.Instances, model.Instance{
			ID:       fmt.Sprintf("svc-%05d-%d", i, j),
			Address:  fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1),
			Labels:   map[string]string{"app": fmt.Sprintf("svc-%05d", i), "version": "v1"},
			Locality: "us-east1/us-east1-b",
		})
	}
	if variant > 0 { // every variant moves the first instance somewhere new
		s.Instances[0].Address = fmt.Sprintf("10.251.%d.%d", variant/250%250, variant%250)
	}
	return s
}

// benchEnv is a pipeline, store and ADS server holding the full data set.
type benchEnv struct {
	pipe  *pipeline.Pipeline
	store *snapshot.Store
	addr  string
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	store := snapshot.NewStore()
	pipe := pipeline.New(store, pipeline.Config{Quiet: 50 * time.Microsecond, MaxDelay: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = pipe.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })

	services := make([]model.Service, benchServices)
	for i := range services {
		services[i] = benchService(i, 0)
	}
	start := time.Now()
	pipe.Replace(services)
	for !store.Current().Ready {
		time.Sleep(time.Millisecond)
	}
	b.Logf("listing of %d services x %d instances converted and applied in %v", benchServices, benchInstances, time.Since(start))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer(xds.GRPCServerOptions()...)
	xds.NewServer(store, xds.Options{}).Register(g)
	go func() { _ = g.Serve(lis) }()
	b.Cleanup(g.Stop)
	return &benchEnv{pipe: pipe, store: store, addr: lis.Addr().String()}
}

func connectSinks(b *testing.B, ctx context.Context, addr, protocol string, n int) []*loadtest.Sink {
	b.Helper()
	sinks := make([]*loadtest.Sink, n)
	for i := range sinks {
		var err error
		if protocol == "sotw" {
			sinks[i], err = loadtest.DialSotW(ctx, addr, benchType)
		} else {
			sinks[i], err = loadtest.DialDelta(ctx, addr, benchType)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sinks[i].Close() })
	}
	return sinks
}

// waitAll returns when every sink holds version: the last arrival and the
// bytes the last sink received.
func waitAll(b *testing.B, sinks []*loadtest.Sink, version string) (time.Time, int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last time.Time
	var bytes int
	for _, s := range sinks {
		a, err := s.Wait(ctx, version)
		if err != nil {
			b.Fatalf("waiting for version %s: %v", version, err)
		}
		if a.At.After(last) {
			last = a.At
		}
		bytes = a.Bytes
	}
	return last, bytes
}

// BenchmarkInstanceChange measures one instance of one service changing,
// from the registry report to every sink holding the new version. One op is
// one change; p50/p99 are over the ops of the run.
func BenchmarkInstanceChange(b *testing.B) {
	for _, c := range []struct {
		protocol string
		sinks    int
	}{{"sotw", benchSinks}, {"delta", benchSinks}, {"sotw", 1}, {"delta", 1}} {
		protocol := c.protocol
		b.Run(fmt.Sprintf("%s-%dsinks", protocol, c.sinks), func(b *testing.B) {
			env := newBenchEnv(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sinks := connectSinks(b, ctx, env.addr, protocol, c.sinks)
			waitAll(b, sinks, env.store.Current().Collection(snapshot.ServiceEntry).Version)
			runtime.GC()
			var latencies []time.Duration
			var bytesPerSink int
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				svc := benchService(i%benchServices, i+1)
				before := env.store.Current().Seq
				// Wait for the snapshot on a subscription, not by spinning:
				// a spinning waiter would take one of the two cores from the
				// path being measured.
				changed, unsubscribe := env.store.Subscribe()
				start := time.Now()
				env.pipe.Update(svc)
				snap := env.store.Current()
				for snap.Seq == before {
					<-changed
					snap = env.store.Current()
				}
				unsubscribe()
				if d := snap.Collection(snapshot.ServiceEntry).LastDiff(); len(d.EndpointOnly) != 1 {
					b.Fatalf("op %d: diff %+v, want one endpoint-only update", i, d)
				}
				version := snap.Collection(snapshot.ServiceEntry).Version
				last, n := waitAll(b, sinks, version)
				bytesPerSink = n
				latencies = append(latencies, last.Sub(start))
			}
			b.StopTimer()
			slices.Sort(latencies)
			b.ReportMetric(ms(percentile(latencies, 50)), "p50-ms")
			b.ReportMetric(ms(percentile(latencies, 99)), "p99-ms")
			b.ReportMetric(float64(bytesPerSink), "bytes/sink")
			b.ReportMetric(rssMB(), "rss-MB")
		})
	}
}

// BenchmarkInitialSync measures 10 sinks connecting at once to a source
// holding the full data set, until every one holds the full state.
func BenchmarkInitialSync(b *testing.B) {
	env := newBenchEnv(b)
	version := env.store.Current().Collection(snapshot.ServiceEntry).Version
	var bytes int
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		sinks := connectSinks(b, ctx, env.addr, "sotw", benchSinks)
		_, bytes = waitAll(b, sinks, version)
		cancel()
		for _, s := range sinks {
			_ = s.Close()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(bytes), "bytes/sink")
	b.ReportMetric(rssMB(), "rss-MB")
}

func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	if i > 0 {
		i--
	}
	return sorted[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// rssMB reads the process's resident set size, the figure an operator sees.
func rssMB() float64 {
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

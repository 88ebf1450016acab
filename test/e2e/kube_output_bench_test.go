package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
	"github.com/galleon-mesh/galleon/test/istiod"
	"github.com/galleon-mesh/galleon/test/kube"
	"github.com/galleon-mesh/galleon/test/ztunnel"
)

// BenchmarkKubernetesOutput measures the Kubernetes output (--output-kubernetes) at each scale of
// GALLEON_KUBEOUT_SERVICES (default "1000,10000") services of 10 instances, galleon-file on a real
// kube-apiserver with istiod in ambient mode (the first release of the matrix) and a ztunnel's view
// of istiod: the first write (time, requests, what etcd holds after), then b.N endpoint-only
// changes (time from the file write to the ztunnel's view, requests per change, istiod's full
// pushes), then two storms: 1,000 services changed at once, and one service changed 1,000 times
// in a second (requests until quiet). The client's limit is GALLEON_KUBEOUT_QPS (default 200)
// a second, bursts of twice that. The set-up of a scale runs once, outside the child benchmark.
func BenchmarkKubernetesOutput(b *testing.B) {
	rels, err := istiod.Releases()
	if err != nil {
		b.Fatal(err)
	}
	qps := envInts(b, "GALLEON_KUBEOUT_QPS", "200")[0]
	for _, services := range envInts(b, "GALLEON_KUBEOUT_SERVICES", "1000,10000") {
		k := startKubeOutput(b, rels[0], services, qps)
		b.Run(fmt.Sprintf("services=%d", services), func(b *testing.B) {
			b.ResetTimer()
			r := k.measure(b, b.N)
			b.StopTimer()
			if r.fullPushes != 0 {
				b.Errorf("%d endpoint-only changes caused %v full pushes in istiod, want 0", b.N, r.fullPushes)
			}
			b.ReportMetric(ms(percentile(r.took, 50)), "p50-ms")
			b.ReportMetric(ms(r.took[len(r.took)-1]), "max-ms")
			b.ReportMetric(r.requestsPerChange, "requests/change")
		})
		k.storms(b)
		k.stop()
	}
}

// TestKubernetesOutputBenchHarness runs BenchmarkKubernetesOutput's set-up, changes and storms at
// 50 services, 3 changes, at the default rate: every change reaches the ztunnel with one request
// and no full push; the wide storm writes each changed service once; the deep one stays within
// the token bucket's bound.
func TestKubernetesOutputBenchHarness(t *testing.T) {
	k := startKubeOutput(t, firstRelease(t), 50, defaultKubeOutputQPS)
	r := k.measure(t, 3)
	if r.fullPushes != 0 || r.requestsPerChange != 1 || len(r.took) != 3 {
		t.Errorf("3 changes: %v full pushes (want 0), %.2f requests a change (want 1), %d reached the ztunnel", r.fullPushes, r.requestsPerChange, len(r.took))
	}
	wide, deep := k.storms(t)
	if wide.requests != 50 {
		t.Errorf("50 services changed at once: %v requests, want 50 (one each)", wide.requests)
	}
	// The token bucket allows its burst, then the rate, from the first write to the last
	// request (and a few for the clocks' grain).
	if limit := 2*defaultKubeOutputQPS + defaultKubeOutputQPS*(deep.wrote+deep.last).Seconds() + 5; deep.requests < 1 || deep.requests > limit {
		t.Errorf("one service changed 1,000 times in %v: %v requests, want 1 to %.0f (the burst, then the rate)", deep.wrote, deep.requests, limit)
	}
}

// defaultKubeOutputQPS is --kubernetes-qps's default (burst: twice it).
const defaultKubeOutputQPS = 20

type kubeOutput struct {
	services int
	dir      string
	c        *kube.Cluster
	g        *galleon
	ist      *istiod.Istiod
	zt       *ztunnel.Watcher
	endWatch context.CancelFunc
	variant  int
}

func startKubeOutput(b testing.TB, rel istiod.Release, services, qps int) *kubeOutput {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	k := &kubeOutput{services: services, dir: b.TempDir()}
	k.c = kube.Start(b)
	istiod.PrepareCluster(b, k.c, rel)
	client, err := k.c.Client()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := client.ApplyYAML(ctx, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+filegen.DefaultNamespace+"}\n"), "galleon-bench"); err != nil {
		b.Fatal(err)
	}
	if err := filegen.Generate(filegen.GenerateConfig{Dir: k.dir, Services: services, Instances: userPathInstances}); err != nil {
		b.Fatal(err)
	}
	etcdBefore := etcdSize(b, ctx, k.c)
	start := time.Now()
	k.g = startGalleon(b, galleonBinary(b, "galleon-file"), "--file-dir", k.dir, "--file-scan-quiet", "1ms",
		"--debounce-quiet", "1ms", "--debounce-max", "10ms", "--output-kubernetes", "--kubeconfig", k.c.Kubeconfig,
		"--kubernetes-qps", strconv.Itoa(qps), "--kubernetes-burst", strconv.Itoa(2*qps))
	ready := time.Since(start)
	if err := k.g.WaitFor(ctx, func() (bool, error) {
		objs, err := k.metric(ctx, "galleon_kubernetes_objects", map[string]string{"kind": "ServiceEntry"})
		return objs == float64(services+1), err
	}); err != nil {
		b.Fatalf("the first write: %v", err)
	}
	written := time.Since(start)
	requests, err := k.metric(ctx, "galleon_kubernetes_writes_total", nil)
	if err != nil {
		b.Fatal(err)
	}
	etcdAfter := etcdSize(b, ctx, k.c)
	b.Logf("services=%d: galleon-file ready in %v; the first write of %d ServiceEntries took %v from its start (%.0f requests, --kubernetes-qps %d); etcd's database in use %.1f -> %.1f MiB",
		services, ready.Round(time.Millisecond), services+1, written.Round(time.Millisecond), requests, qps, etcdBefore/(1<<20), etcdAfter/(1<<20))

	istStart := time.Now()
	k.ist = istiod.Start(b, istiod.Options{Release: rel, Kubeconfig: k.c.Kubeconfig, ConfigSources: []string{"k8s://"},
		Env: []string{"PILOT_ENABLE_AMBIENT=true"}, StartTimeout: 5 * time.Minute})
	var watchCtx context.Context
	watchCtx, k.endWatch = context.WithCancel(context.Background())
	b.Cleanup(k.stop)
	if k.zt, err = ztunnel.Watch(watchCtx, k.ist.GRPCAddr, "10.99.0.7"); err != nil {
		b.Fatal(err)
	}
	if _, err := k.zt.Wait(ctx, func(v *ztunnel.View) (bool, string) {
		s, ok := v.Service(targetHost)
		if !ok || len(v.Endpoints(s)) != userPathInstances {
			return false, fmt.Sprintf("%s not there with %d workloads", targetHost, userPathInstances)
		}
		return true, ""
	}); err != nil {
		b.Fatalf("the ztunnel's first view: %v", err)
	}
	if err := waitPushesQuiet(ctx, k.ist, time.Second); err != nil {
		b.Fatal(err)
	}
	b.Logf("services=%d: istiod (%s, ambient) started and a ztunnel holds the target %v after istiod's start", services, rel.Name, time.Since(istStart).Round(time.Millisecond))
	return k
}

// targetHost is the host galleon-file gives filegen's target.
var targetHost = "load-target." + filegen.DefaultNamespace + ".internal"

// targetHas is true once the ztunnel's view holds the target with a workload at addr.
func (k *kubeOutput) targetHas(addr string) func(v *ztunnel.View) (bool, string) {
	return func(v *ztunnel.View) (bool, string) {
		s, ok := v.Service(targetHost)
		if !ok {
			return false, "no " + targetHost
		}
		if eps := v.Endpoints(s); !slices.Contains(eps, addr) {
			return false, fmt.Sprintf("%s workloads %v lack %s", targetHost, eps, addr)
		}
		return true, ""
	}
}

func (k *kubeOutput) metric(ctx context.Context, name string, labels map[string]string) (float64, error) {
	fams, _, err := scrapeMetrics(ctx, k.g)
	if err != nil {
		return 0, err
	}
	n, _ := metricSum(fams, name, labels)
	return n, nil
}

// kubeOutputResult is what measure saw.
type kubeOutputResult struct {
	took              []time.Duration // file write -> the ztunnel's view, sorted
	requestsPerChange float64
	fullPushes        float64
}

// measure makes n changes, each after the last one's pushes.
func (k *kubeOutput) measure(b testing.TB, n int) kubeOutputResult {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n)*time.Minute+time.Minute)
	defer cancel()
	requestsBefore, err := k.metric(ctx, "galleon_kubernetes_writes_total", nil)
	if err != nil {
		b.Fatal(err)
	}
	pushesBefore, err := k.ist.PushCounters(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var took []time.Duration
	for range n {
		time.Sleep(userPathSettle)
		k.variant++
		addr := filegen.MoverAddr(k.variant)
		written := time.Now()
		if err := filegen.WriteTargetIn(k.dir, filegen.DefaultNamespace, userPathInstances, k.variant); err != nil {
			b.Fatal(err)
		}
		v, err := k.zt.Wait(ctx, k.targetHas(addr))
		if err != nil {
			b.Fatalf("change %d: %v", k.variant, err)
		}
		took = append(took, v.Received.Sub(written))
	}
	if err := waitPushesQuiet(ctx, k.ist, time.Second); err != nil {
		b.Fatal(err)
	}
	requests, err := k.metric(ctx, "galleon_kubernetes_writes_total", nil)
	if err != nil {
		b.Fatal(err)
	}
	pushes, err := k.ist.PushCounters(ctx)
	if err != nil {
		b.Fatal(err)
	}
	slices.Sort(took)
	r := kubeOutputResult{took: took, requestsPerChange: (requests - requestsBefore) / float64(n), fullPushes: pushes.FullPushes - pushesBefore.FullPushes}
	b.Logf("services=%d: %d changes, file write -> a ztunnel's view p50 %.1f ms, max %.1f ms; %.2f API requests a change; full pushes %v",
		k.services, n, ms(percentile(took, 50)), ms(took[len(took)-1]), r.requestsPerChange, r.fullPushes)
	return r
}

// stormResult is what one storm cost: requests, how long the registry writes took, and the
// time from their end to the last request.
type stormResult struct {
	requests    float64
	wrote, last time.Duration
}

// storms makes two registry storms and logs the requests each cost.
func (k *kubeOutput) storms(b testing.TB) (wide, deep stormResult) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Wide: the first 1,000 services get a new label on every instance (an endpoint-only
	// change: version v1 -> v2), in two file writes.
	files, err := filepath.Glob(filepath.Join(k.dir, "services-*.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	files = files[:min(len(files), 2)] // 500 services a file
	wide = k.storm(b, ctx, func() {
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				b.Fatal(err)
			}
			tmp := filepath.Join(k.dir, ".storm.tmp")
			if err := os.WriteFile(tmp, []byte(strings.ReplaceAll(string(data), "version: v1", "version: v2")), 0o644); err != nil {
				b.Fatal(err)
			}
			if err := os.Rename(tmp, f); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Logf("services=%d: storm of %d services changed at once (%d file writes in %v): %.0f API requests, the last %v after the writes",
		k.services, min(1000, k.services), len(files), wide.wrote.Round(time.Millisecond), wide.requests, wide.last.Round(time.Millisecond))

	// Deep: the target changed 1,000 times within about a second.
	deep = k.storm(b, ctx, func() {
		for range 1000 {
			k.variant++
			if err := filegen.WriteTargetIn(k.dir, filegen.DefaultNamespace, userPathInstances, k.variant); err != nil {
				b.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
	})
	b.Logf("services=%d: storm of 1,000 changes to one service (file writes over %v): %.0f API requests, the last %v after the writes",
		k.services, deep.wrote.Round(time.Millisecond), deep.requests, deep.last.Round(time.Millisecond))
	return wide, deep
}

// storm runs write, then waits until the writer has nothing pending and made no request for 3 s;
// it returns the requests made, how long write took, and the time from its end to the last
// request.
func (k *kubeOutput) storm(b testing.TB, ctx context.Context, write func()) stormResult {
	before, err := k.metric(ctx, "galleon_kubernetes_writes_total", nil)
	if err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	write()
	wrote := time.Now()
	last, lastAt := before, wrote
	for {
		time.Sleep(100 * time.Millisecond)
		n, err := k.metric(ctx, "galleon_kubernetes_writes_total", nil)
		if err != nil {
			b.Fatal(err)
		}
		pending, err := k.metric(ctx, "galleon_kubernetes_pending", nil)
		if err != nil {
			b.Fatal(err)
		}
		if n != last {
			last, lastAt = n, time.Now()
		}
		if pending == 0 && time.Since(lastAt) > 3*time.Second {
			return stormResult{requests: last - before, wrote: wrote.Sub(began), last: lastAt.Sub(wrote)}
		}
		if ctx.Err() != nil {
			b.Fatalf("the writer was not quiet after a storm: %v", ctx.Err())
		}
	}
}

func (k *kubeOutput) stop() {
	if k.endWatch != nil {
		k.endWatch()
	}
	if k.ist != nil {
		k.ist.Stop()
	}
	if k.g != nil {
		k.g.Stop()
	}
}

// etcdSize is etcd's etcd_mvcc_db_total_size_in_use_in_bytes: the bytes of its database in use.
func etcdSize(b testing.TB, ctx context.Context, c *kube.Cluster) float64 {
	b.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.EtcdURL+"/metrics", nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_mvcc_db_total_size_in_use_in_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	b.Fatalf("etcd's /metrics have no etcd_mvcc_db_total_size_in_use_in_bytes (%v)", sc.Err())
	return 0
}

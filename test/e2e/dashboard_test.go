package e2e

// The Grafana dashboard (deploy/grafana/galleon.json) against the metrics the binaries expose.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/galleon-mesh/galleon/internal/testing/testpki"
	"github.com/galleon-mesh/galleon/internal/xdsclient"
	"github.com/galleon-mesh/galleon/test/internal/proc"
)

// adapterMetricDirs maps the prefix of an adapter's own metrics (and galleon-fleet's) to the
// directory whose packages register them. The dashboard's panels for those adapters are checked against the names registered in
// that package's source (every prometheus.New*(prometheus.*Opts{Name: "..."}) call), since
// running a Consul agent, a ZooKeeper, two Eureka servers and a Nacos server here to scrape each
// binary would cost minutes; galleon-file's own and the core's are checked against the running
// binary.
var adapterMetricDirs = map[string]string{
	"galleon_consul_":    "adapters/consul",
	"galleon_zookeeper_": "adapters/zookeeper",
	"galleon_eureka_":    "adapters/eureka",
	"galleon_nacos_":     "adapters/nacos",
	// galleon-fleet's own: internal/fleet's and internal/server's (its list reloads).
	"galleon_fleet_": "internal",
}

// TestGrafanaDashboardMetrics runs galleon-file (TLS on, so the TLS metrics exist) with a SotW,
// a Delta and a legacy MCP sink that ACK everything, makes a registry change reach them so the
// change -> ACK histograms have samples, scrapes /metrics and checks that every metric name any
// panel or variable of deploy/grafana/galleon.json queries is one the binary exposes (an
// adapter's own: one its package registers). It also lints the exposition with Prometheus's
// promlint and checks that no two families share a name in OpenMetrics.
func TestGrafanaDashboardMetrics(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dash := loadDashboard(t, filepath.Join(root, "deploy", "grafana", "galleon.json"))

	bin := galleonBinary(t, "galleon-file")
	pki, err := testpki.Write(t.TempDir(), "galleon-e2e")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	svc := func(addresses ...string) fileRegistry {
		s := fileService{Name: "dash", Namespace: "e2e", Hosts: []string{"dash.e2e.internal"},
			Ports: []filePort{{Number: 8080, Protocol: "HTTP", Name: "http"}}}
		for i, a := range addresses {
			s.Instances = append(s.Instances, fileInstance{ID: fmt.Sprintf("dash-%d", i), Address: a})
		}
		return fileRegistry{Services: []fileService{s}}
	}
	writeRegistryFile(t, dir, "dash.yaml", svc("10.8.0.1"))
	// A malformed file: a rejected record, counted by reason.
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("services: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGalleon(t, bin, "--file-dir", dir, "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--debounce-quiet", "10ms")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := dialTLS(t, g.Addr, pki.CA)
	stopSinks := runAckingSinks(ctx, t, conn)
	defer stopSinks()

	// Once every sink holds the first state, a change: each protocol's sink ACKs it.
	if err := proc.WaitFor(ctx, func() (bool, error) {
		fams, _, err := scrapeMetrics(ctx, g)
		if err != nil {
			return false, err
		}
		sotw, _ := metricSum(fams, "galleon_xds_acks_total", map[string]string{"protocol": "sotw"})
		delta, _ := metricSum(fams, "galleon_xds_acks_total", map[string]string{"protocol": "delta"})
		mcp, _ := metricSum(fams, "galleon_mcp_acks_total", nil)
		return sotw >= 2 && delta >= 1 && mcp >= 1, nil
	}); err != nil {
		t.Fatalf("the sinks did not ACK the first state: %v\n%s", err, g.Tail(30))
	}
	writeRegistryFile(t, dir, "dash.yaml", svc("10.8.0.1", "10.8.0.2"))
	var fams map[string]*dto.MetricFamily
	var body []byte
	if err := proc.WaitFor(ctx, func() (bool, error) {
		fams, body, err = scrapeMetrics(ctx, g)
		if err != nil {
			return false, err
		}
		for _, p := range []string{"sotw", "delta", "mcp"} {
			if histogramCount(fams, "galleon_change_acked_seconds", map[string]string{"protocol": p}) == 0 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the change was not observed as ACKed by every protocol's sink: %v\n%s", err, g.Tail(30))
	}
	for _, p := range []string{"sotw", "delta", "mcp"} {
		t.Logf("change -> every %s sink ACKed: %.1f ms", p,
			1000*histogramSum(fams, "galleon_change_acked_seconds", map[string]string{"protocol": p})/float64(histogramCount(fams, "galleon_change_acked_seconds", map[string]string{"protocol": p})))
	}

	lintExposition(t, body, fams)

	registered := map[string]map[string]string{} // prefix -> name -> type
	for prefix, d := range adapterMetricDirs {
		registered[prefix] = registeredMetrics(t, filepath.Join(root, d))
	}
	uses := dash.metricNames(t)
	if len(uses) < 20 {
		t.Fatalf("found %d metric names in the dashboard: the parser missed its queries", len(uses))
	}
	exposed := map[string]string{} // name -> type
	for n, f := range fams {
		exposed[n] = strings.ToLower(f.GetType().String())
	}
	for _, name := range slices.Sorted(maps.Keys(uses)) {
		where := uses[name]
		if prefix, own := adapterPrefix(name); own {
			if !known(name, registered[prefix]) {
				t.Errorf("%s (%s) is not registered by %s", name, where, adapterMetricDirs[prefix])
			}
			continue
		}
		if !known(name, exposed) {
			t.Errorf("%s (%s) is not exposed by galleon-file", name, where)
		}
	}
	t.Logf("%d metric names in %d panels checked", len(uses), dash.panels)
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	panels int // non-row panels, counted by metricNames
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func loadDashboard(t *testing.T, path string) *dashboard {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var ds bool
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && string(v.Query) == `"prometheus"` {
			ds = true
		}
	}
	if !ds {
		t.Errorf("%s has no Prometheus datasource variable (type datasource, query prometheus)", path)
	}
	return &d
}

// metricNames returns every metric name the dashboard's queries and variables select, each
// with where it is used (the first panel). Every panel must query the datasource variable and
// select at least one metric.
func (d *dashboard) metricNames(t *testing.T) map[string]string {
	t.Helper()
	uses := map[string]string{}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d is used twice", p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			d.panels++
			where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
			if !strings.Contains(string(p.Datasource), "${datasource}") {
				t.Errorf("%s does not query the datasource variable: %s", where, p.Datasource)
			}
			n := 0
			for _, tg := range p.Targets {
				names, err := promqlMetricNames(tg.Expr)
				if err != nil {
					t.Errorf("%s: %v", where, err)
				}
				for _, name := range names {
					n++
					if _, ok := uses[name]; !ok {
						uses[name] = where
					}
				}
			}
			if n == 0 {
				t.Errorf("%s selects no metric", where)
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if json.Unmarshal(v.Query, &s) != nil {
				t.Errorf("variable %s: query is neither a string nor an object: %s", v.Name, v.Query)
				continue
			}
			q.Query = s
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(<selector>, <label>)", v.Name, q.Query)
			continue
		}
		names, err := promqlMetricNames(m[1])
		if err != nil || len(names) == 0 {
			t.Errorf("variable %s: %q selects no metric (%v)", v.Name, q.Query, err)
		}
		for _, name := range names {
			if _, ok := uses[name]; !ok {
				uses[name] = "variable " + v.Name
			}
		}
	}
	return uses
}

var labelValues = regexp.MustCompile(`^\s*label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// promqlKeywords are PromQL words that are neither functions nor metrics: aggregation
// operators (which may be followed by by/without before their parenthesis), set and
// comparison keywords, modifiers, and literals.
var promqlKeywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"inf": true, "nan": true,
}

// promqlLabelLists are the keywords followed by a parenthesised list of label names.
var promqlLabelLists = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// promqlMetricNames returns the metric names an expression selects, in order of appearance:
// identifiers that are not functions (followed by a parenthesis), keywords, label names (in
// {...} matchers and by/without/on/ignoring/group_* lists), durations ([5m], offset 1h),
// strings, numbers or Grafana variables ($__rate_interval, ${job}). A selector written
// {__name__="x"} is refused: the test could not check it.
func promqlMetricNames(expr string) ([]string, error) {
	var names []string
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || (c|0x20) >= 'a' && (c|0x20) <= 'z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	skipString := func(i int) (int, error) {
		q := expr[i]
		for j := i + 1; j < len(expr); j++ {
			switch {
			case expr[j] == '\\' && q != '`':
				j++
			case expr[j] == q:
				return j + 1, nil
			}
		}
		return 0, fmt.Errorf("unterminated string in %q", expr)
	}
	// skipTo skips to just past the closing byte, strings included.
	skipTo := func(i int, closing byte) (int, string, error) {
		start := i
		for i < len(expr) {
			switch c := expr[i]; {
			case c == '"' || c == '\'' || c == '`':
				j, err := skipString(i)
				if err != nil {
					return 0, "", err
				}
				i = j
			case c == closing:
				return i + 1, expr[start:i], nil
			default:
				i++
			}
		}
		return 0, "", fmt.Errorf("no %q closing %q", closing, expr[start-1:])
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j, err := skipString(i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '{':
			j, inside, err := skipTo(i+1, '}')
			if err != nil {
				return nil, err
			}
			if strings.Contains(inside, "__name__") {
				return nil, fmt.Errorf("%q selects by __name__: name the metric instead", expr)
			}
			i = j
		case c == '[':
			j, _, err := skipTo(i+1, ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				j, _, err := skipTo(i+1, '}')
				if err != nil {
					return nil, err
				}
				i = j
				continue
			}
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			// Numbers and durations: 0.99, 1e9, 0x1f, 5m, 1h30m.
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdent(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n') {
				k++
			}
			next := byte(0)
			if k < len(expr) {
				next = expr[k]
			}
			i = j
			switch {
			case promqlLabelLists[strings.ToLower(word)]:
				if next == '(' {
					end, _, err := skipTo(k+1, ')')
					if err != nil {
						return nil, err
					}
					i = end
				}
			case promqlKeywords[strings.ToLower(word)]:
			case next == '(':
				// A function call.
			default:
				names = append(names, word)
			}
		default:
			i++
		}
	}
	return names, nil
}

// TestPromQLMetricNames checks the expression reader the dashboard test relies on.
func TestPromQLMetricNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`galleon_services`, []string{"galleon_services"}},
		{`sum(galleon_services{job=~"$job", instance=~"$instance"})`, []string{"galleon_services"}},
		{`histogram_quantile(0.99, sum by (le, protocol) (rate(galleon_change_acked_seconds_bucket{job=~"$job"}[$__rate_interval])))`,
			[]string{"galleon_change_acked_seconds_bucket"}},
		{`sum(rate(a_total[5m])) by (reason) / ignoring(reason) group_left sum(b{x="}{[("}) offset 1h`, []string{"a_total", "b"}},
		{`max by (instance) (time() - galleon_registry_last_sync_timestamp_seconds{registry!=""}) > bool 300 and on(instance) up`,
			[]string{"galleon_registry_last_sync_timestamp_seconds", "up"}},
		{`label_replace(x, "dst", "$1", "src", "(.*)") * on (a) group_right (b) y[${range}:1m]`, []string{"x", "y"}},
		{`topk(3, sum without (le) (z)) + 1e3 + Inf`, []string{"z"}},
	} {
		got, err := promqlMetricNames(c.expr)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("promqlMetricNames(%q) = %v, %v; want %v", c.expr, got, err, c.want)
		}
	}
	for _, bad := range []string{`x{a="b"`, `{__name__="x"}`, `sum(x[5m)`, `x{a="unterminated}`} {
		if _, err := promqlMetricNames(bad); err == nil {
			t.Errorf("promqlMetricNames(%q) did not fail", bad)
		}
	}
}

// known reports whether name is a metric of types (name -> type), or the _bucket, _sum or
// _count series of a histogram (or summary) there.
func known(name string, types map[string]string) bool {
	if _, ok := types[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch types[base] {
		case "histogram":
			return true
		case "summary":
			return suffix != "_bucket"
		}
	}
	return false
}

func adapterPrefix(name string) (string, bool) {
	for prefix := range adapterMetricDirs {
		if strings.HasPrefix(name, prefix) {
			return prefix, true
		}
	}
	return "", false
}

// registeredMetrics reads the non-test Go files of dir and returns the metrics they register
// (name -> counter, gauge, histogram or summary): every prometheus.New<Type>[Vec|Func] call
// whose options literal names the metric with a string.
func registeredMetrics(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" || !strings.HasPrefix(sel.Sel.Name, "New") {
				return true
			}
			kind := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(sel.Sel.Name, "New"), "Vec"), "Func")
			opts, ok := call.Args[0].(*ast.CompositeLit)
			if !ok {
				return true
			}
			for _, el := range opts.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				if key, ok := kv.Key.(*ast.Ident); !ok || key.Name != "Name" {
					continue
				}
				if lit, ok := kv.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if name, err := strconv.Unquote(lit.Value); err == nil {
						out[name] = strings.ToLower(kind)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("found no prometheus.New*(...{Name: ...}) call in %s: the reader of the source needs updating", dir)
	}
	return out
}

// lintExposition applies Prometheus's metric lint (counters end in _total, base units,
// no camelCase, help text, ...) to the galleon_* families, and checks that no galleon_* family's
// name is another's in OpenMetrics, where a counter X_total is family X and a histogram X owns X_bucket,
// X_sum and X_count.
func lintExposition(t *testing.T, body []byte, fams map[string]*dto.MetricFamily) {
	t.Helper()
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "galleon_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "galleon_") {
			continue // the Go collector's go_memstats_alloc_bytes{,_total} are not ours to fix
		}
		var owned []string
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			if base, ok := strings.CutSuffix(name, "_total"); ok {
				owned = append(owned, base)
			}
		case dto.MetricType_HISTOGRAM, dto.MetricType_SUMMARY:
			owned = append(owned, name+"_bucket", name+"_sum", name+"_count")
		}
		for _, o := range owned {
			if _, clash := fams[o]; clash {
				t.Errorf("%s %s and %s share a family name in OpenMetrics", strings.ToLower(f.GetType().String()), name, o)
			}
		}
	}
}

// dialTLS connects to a Galleon gRPC listener whose certificate ca signed.
func dialTLS(t *testing.T, addr, ca string) *grpc.ClientConn {
	t.Helper()
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", ca)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// runAckingSinks opens a SotW stream (ServiceEntries and a type Galleon holds nothing of), a
// Delta stream and a legacy MCP stream on conn, each ACKing every response from a goroutine of
// its own and, after its first, sending one ACK with a stale nonce (a bad request, counted). The
// returned func cancels the streams and waits for the goroutines.
func runAckingSinks(ctx context.Context, t *testing.T, conn *grpc.ClientConn) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	sotw, err := xdsclient.OpenSotW(ctx, conn, xdsclient.NewNode("dashboard-sotw"), []string{seTypeURL, "example.com/v1/Unknown"})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	delta, err := xdsclient.OpenDelta(ctx, conn, xdsclient.NewNode("dashboard-delta"), []string{seTypeURL})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	legacy, err := xdsclient.OpenLegacy(ctx, conn, "dashboard-mcp", []string{xdsclient.LegacyServiceEntries}, false)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	loop := func(name string, next func(first bool) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := true; ; first = false {
				if err := next(first); err != nil {
					if ctx.Err() == nil {
						t.Errorf("%s sink: %v", name, err)
					}
					return
				}
			}
		}()
	}
	loop("sotw", func(first bool) error {
		r, err := sotw.Recv()
		if err == nil {
			err = sotw.ACK(r)
		}
		if err == nil && first {
			err = sotw.ACK(&xdsclient.Response{TypeURL: r.TypeURL, VersionInfo: r.VersionInfo, Nonce: "stale"})
		}
		return err
	})
	loop("delta", func(bool) error {
		r, err := delta.Recv()
		if err == nil {
			err = delta.ACK(r)
		}
		return err
	})
	loop("mcp", func(first bool) error {
		r, err := legacy.Recv()
		if err == nil {
			err = legacy.ACK(r)
		}
		if err == nil && first {
			err = legacy.ACK(&xdsclient.LegacyResponse{Collection: r.Collection, Nonce: "stale"})
		}
		return err
	})
	return func() { cancel(); wg.Wait() }
}

func histogramCount(fams map[string]*dto.MetricFamily, name string, labels map[string]string) uint64 {
	var n uint64
	for _, m := range matching(fams, name, labels) {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

func histogramSum(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	var s float64
	for _, m := range matching(fams, name, labels) {
		s += m.GetHistogram().GetSampleSum()
	}
	return s
}

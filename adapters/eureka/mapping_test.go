package eureka

import (
	"compress/gzip"
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/eureka/internal/wire"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

func newTestRegistry(t *testing.T, cfg Config) *Registry {
	t.Helper()
	if len(cfg.URLs) == 0 {
		cfg.URLs = []string{"http://127.0.0.1:8761/eureka"}
	}
	cfg.Logger = testLogger()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func upInstance(id, ip string, port uint32) wire.Instance {
	return wire.Instance{InstanceID: id, App: "ORDERS", IPAddr: ip, HostName: id + ".internal", Status: wire.StatusUp,
		OverriddenStatus: wire.StatusUnknown, Port: wire.Port{Number: port, Enabled: true}, SecurePort: wire.Port{Number: 443}}
}

func TestEffectiveStatus(t *testing.T) {
	for _, tc := range []struct{ status, overridden, want string }{
		{wire.StatusUp, wire.StatusUnknown, wire.StatusUp},
		{wire.StatusUp, "", wire.StatusUp},
		{wire.StatusUp, wire.StatusOutOfService, wire.StatusOutOfService}, // an override the instance's renewal did not apply
		{wire.StatusOutOfService, wire.StatusUnknown, wire.StatusOutOfService},
		{wire.StatusDown, wire.StatusUp, wire.StatusDown}, // the instance's own DOWN wins (DownOrStartingRule)
		{wire.StatusStarting, wire.StatusOutOfService, wire.StatusStarting},
		{wire.StatusOutOfService, wire.StatusUp, wire.StatusUp},
		{wire.StatusUnknown, wire.StatusUnknown, wire.StatusUnknown},
	} {
		in := wire.Instance{Status: tc.status, OverriddenStatus: tc.overridden}
		if got := effectiveStatus(&in); got != tc.want {
			t.Errorf("status %s, overriddenstatus %q: %s, want %s", tc.status, tc.overridden, got, tc.want)
		}
	}
	for status, want := range map[string]model.Health{
		wire.StatusUp: model.Healthy, wire.StatusOutOfService: model.Draining, wire.StatusDown: model.Unhealthy,
		wire.StatusStarting: model.Unhealthy, wire.StatusUnknown: model.Unhealthy,
	} {
		if got := healthOf(status); got != want {
			t.Errorf("healthOf(%s) = %v, want %v", status, got, want)
		}
	}
}

func TestMapApplication(t *testing.T) {
	r := newTestRegistry(t, Config{})
	now := time.Now()
	app := &wire.Application{Name: "ORDERS", Instances: []wire.Instance{
		upInstance("o-3", "10.0.0.3", 9000), // a random port: mapped onto the common one
		upInstance("o-1", "10.0.0.1", 8080),
		upInstance("o-2", "10.0.0.2", 8080),
	}}
	app.Instances[1].SecurePort = wire.Port{Number: 8443, Enabled: true}
	app.Instances[1].Metadata = map[string]string{"version": "v1", "zone": "zone-a", "region": "eu"}
	app.Instances[2].Status = wire.StatusDown
	m := r.mapApplication(app, now)
	if !m.ok || len(m.rejected) != 0 {
		t.Fatalf("mapped %+v", m)
	}
	want := model.Service{
		Namespace: DefaultNamespace, Name: "orders", Hosts: []string{"orders.eureka"},
		Ports: []model.Port{{Number: 8080, Protocol: model.ProtocolHTTP}, {Number: 8443, Protocol: model.ProtocolHTTPS}},
		Instances: []model.Instance{
			{ID: "o-1", Address: "10.0.0.1", Labels: map[string]string{"version": "v1", "zone": "zone-a", "region": "eu"}, Locality: "eu/zone-a", Health: model.Healthy},
			{ID: "o-2", Address: "10.0.0.2", Health: model.Unhealthy},
			{ID: "o-3", Address: "10.0.0.3", Ports: map[uint32]uint32{8080: 9000}, Health: model.Healthy},
		},
	}
	if diff := registrytest.Diff(want, m.svc); diff != "" {
		t.Errorf("mapped service differs:\n%s", diff)
	}
}

func TestMapApplicationProtocolAndRejections(t *testing.T) {
	r := newTestRegistry(t, Config{})
	app := &wire.Application{Name: "GRPC-SVC", Instances: []wire.Instance{
		upInstance("g-1", "10.0.0.1", 9090),
		upInstance("g-2", "10.0.0.2", 9090),
	}}
	app.Instances[0].Metadata = map[string]string{DefaultProtocolKey: "grpc"}
	app.Instances[1].Metadata = map[string]string{DefaultProtocolKey: "soap"}
	m := r.mapApplication(app, time.Now())
	if !m.ok || len(m.svc.Instances) != 1 || m.svc.Ports[0].Protocol != model.ProtocolGRPC {
		t.Fatalf("mapped %+v", m.svc)
	}
	err := m.rejected["GRPC-SVC/g-2"]
	if err == nil || reasonOf(err) != reasonProtocol || !strings.Contains(err.Error(), `"soap"`) {
		t.Errorf("rejections %v, want GRPC-SVC/g-2 for its protocol", m.rejected)
	}
	// Every instance rejected: no service.
	app.Instances = app.Instances[1:]
	if m := r.mapApplication(app, time.Now()); m.ok {
		t.Errorf("an application whose every instance is rejected mapped to %+v", m.svc)
	}
}

func TestMapApplicationSecureOnlyAndAddresses(t *testing.T) {
	r := newTestRegistry(t, Config{Address: AddressHostName})
	in := upInstance("e-1", "10.0.0.1", 0)
	in.Port.Enabled = false
	in.SecurePort = wire.Port{Number: 8443, Enabled: true}
	in.DataCenterInfo = wire.DataCenterInfo{Name: "Amazon", Metadata: map[string]string{"availability-zone": "us-east-1a"}}
	noHost := upInstance("e-2", "10.0.0.2", 0)
	noHost.HostName, noHost.Port.Enabled, noHost.SecurePort = "", false, wire.Port{Number: 8443, Enabled: true}
	m := r.mapApplication(&wire.Application{Name: "EDGE", Instances: []wire.Instance{in, noHost}}, time.Now())
	if !m.ok {
		t.Fatal("not mapped")
	}
	if got := m.svc.Ports; len(got) != 1 || got[0] != (model.Port{Number: 8443, Protocol: model.ProtocolHTTPS}) {
		t.Errorf("ports %+v, want the secure port only", got)
	}
	if a := m.svc.Instances[0].Address; a != "e-1.internal" {
		t.Errorf("address %q, want the hostName (--eureka-address hostname)", a)
	}
	if a := m.svc.Instances[1].Address; a != "10.0.0.2" {
		t.Errorf("address %q, want the ipAddr when there is no hostName", a)
	}
	if l := m.svc.Instances[0].Locality; l != "us-east-1/us-east-1a" {
		t.Errorf("locality %q from an Amazon availability zone", l)
	}
}

func TestHostTemplate(t *testing.T) {
	app := &wire.Application{Name: "Billing_Svc", Instances: []wire.Instance{upInstance("b-1", "10.0.0.1", 80)}}
	app.Instances[0].VIPAddress = "billing.vip.example"
	app.Instances[0].Metadata = map[string]string{"mesh-host": "Billing.Mesh"}
	for _, tc := range []struct{ tmpl, want string }{
		{"", "billing-svc.eureka"},
		{"{{.VIPAddress}}", "billing.vip.example"},
		{`{{index .Metadata "mesh-host"}}`, "billing.mesh"},
		{`{{index .Metadata "absent"}}`, "billing-svc.eureka"}, // empty: the default
		{"{{.Name}}.{{.Namespace}}.svc.cluster.local", "billing-svc.default.svc.cluster.local"},
	} {
		r := newTestRegistry(t, Config{HostTemplate: tc.tmpl})
		m := r.mapApplication(app, time.Now())
		if !m.ok || !slices.Equal(m.svc.Hosts, []string{tc.want}) {
			t.Errorf("--eureka-host-template %q: hosts %v, want %s", tc.tmpl, m.svc.Hosts, tc.want)
		}
		if m.svc.Name != "billing-svc" {
			t.Errorf("name %q", m.svc.Name)
		}
	}
}

func TestMaxLeaseAge(t *testing.T) {
	now := time.Now()
	fresh, stale, unknown := upInstance("i-1", "10.0.0.1", 80), upInstance("i-2", "10.0.0.2", 80), upInstance("i-3", "10.0.0.3", 80)
	fresh.LeaseInfo.LastRenewalTimestamp = now.Add(-30 * time.Second).UnixMilli()
	stale.LeaseInfo.LastRenewalTimestamp = now.Add(-10 * time.Minute).UnixMilli()
	app := &wire.Application{Name: "LEASE", Instances: []wire.Instance{fresh, stale, unknown}}
	health := func(cfg Config) []model.Health {
		m := newTestRegistry(t, cfg).mapApplication(app, now)
		var out []model.Health
		for _, in := range m.svc.Instances {
			out = append(out, in.Health)
		}
		return out
	}
	if got := health(Config{}); !slices.Equal(got, []model.Health{model.Healthy, model.Healthy, model.Healthy}) {
		t.Errorf("off: %v, want every instance healthy", got)
	}
	if got := health(Config{MaxLeaseAge: 5 * time.Minute}); !slices.Equal(got, []model.Health{model.Healthy, model.Unhealthy, model.Healthy}) {
		t.Errorf("--eureka-max-lease-age 5m: %v, want the stale one out and the unknown (0) one kept", got)
	}
}

// TestNameCollision: two applications whose names sanitise alike. The smaller name keeps the
// ServiceEntry and the other is rejected; when the first goes, the second takes it over.
func TestNameCollision(t *testing.T) {
	r := newTestRegistry(t, Config{})
	rec := registrytest.NewRecorder()
	p := newPoller(r, rec)
	p.apps = &wire.Applications{Apps: []wire.Application{
		{Name: "MY_APP", Instances: []wire.Instance{upInstance("a-1", "10.0.0.1", 80)}},
		{Name: "MY-APP", Instances: []wire.Instance{upInstance("b-1", "10.0.0.2", 80)}},
	}}
	p.remap([]string{"MY_APP", "MY-APP"}, time.Now())
	p.reject()
	p.rec.Flush()
	st := rec.State()
	svc := st[model.ServiceKey{Namespace: DefaultNamespace, Name: "my-app"}]
	if len(st) != 1 || len(svc.Instances) != 1 || svc.Instances[0].ID != "b-1" {
		t.Fatalf("state %v: want my-app from MY-APP (the smaller name)", st)
	}
	rejected := map[string]error{}
	for _, e := range rec.Events() {
		if e.Op == registrytest.OpRejected {
			rejected[e.Record] = e.Err
		}
	}
	if err := rejected["MY_APP"]; err == nil || reasonOf(err) != reasonName {
		t.Errorf("rejections %v, want MY_APP for its name", rejected)
	}
	p.apps = &wire.Applications{Apps: p.apps.Apps[:1]}
	p.remap([]string{"MY-APP"}, time.Now())
	p.reject()
	p.rec.Flush()
	svc = rec.State()[model.ServiceKey{Namespace: DefaultNamespace, Name: "my-app"}]
	if len(svc.Instances) != 1 || svc.Instances[0].ID != "a-1" {
		t.Errorf("after MY-APP went: %+v, want MY_APP's instance", svc)
	}
	var cleared bool
	for _, e := range rec.Events() {
		cleared = cleared || e.Op == registrytest.OpRejected && e.Record == "MY_APP" && e.Err == nil
	}
	if !cleared {
		t.Errorf("MY_APP's rejection was not cleared:\n%s", rec.Dump())
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"no URL", Config{}, []string{"--eureka-urls is empty"}},
		{"bad scheme and duplicates", Config{URLs: []string{"ftp://h/eureka", "http://u:p@h:1/eureka/", "http://h:1/eureka"}},
			[]string{`scheme "ftp"`, "lists http://h:1/eureka twice"}},
		{"query", Config{URLs: []string{"http://h:1/eureka?x=1"}}, []string{"query or fragment"}},
		{"intervals", Config{URLs: []string{"http://h/eureka"}, PollInterval: time.Millisecond, MaxLeaseAge: -1},
			[]string{"--eureka-poll-interval 1ms", "--eureka-max-lease-age -1ns"}},
		{"tls", Config{URLs: []string{"https://h/eureka"}, TLSCertFile: "/nonexistent"}, []string{"--eureka-tls-cert and --eureka-tls-key go together"}},
		{"ca", Config{URLs: []string{"https://h/eureka"}, TLSCAFile: "/nonexistent/ca.pem"}, []string{"--eureka-tls-ca"}},
		{"auth file", Config{URLs: []string{"http://h/eureka"}, AuthFile: "/nonexistent/auth"}, []string{"--eureka-auth-file"}},
		{"template", Config{URLs: []string{"http://h/eureka"}, HostTemplate: "{{.Nope}}"}, []string{"--eureka-host-template"}},
		{"namespace and address", Config{URLs: []string{"http://h/eureka"}, Namespace: "Bad_NS", Address: "dns"},
			[]string{`--namespace "Bad_NS"`, `--eureka-address "dns"`}},
	} {
		_, err := New(tc.cfg)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nwant it to say %q", tc.name, err, w)
			}
		}
	}
	_, err := New(Config{URLs: []string{"http://user:hunter2@h:1/eureka", "gopher://user:hunter2@h"}})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("an error about a URL with a password: %v (want one, without the password)", err)
	}
}

func TestParseServerURL(t *testing.T) {
	for raw, want := range map[string]server{
		"http://127.0.0.1:8761/eureka":           {base: "http://127.0.0.1:8761/eureka", host: "127.0.0.1"},
		"https://eureka.example:8443/eureka/v2/": {base: "https://eureka.example:8443/eureka/v2", host: "eureka.example"},
		"http://svc:p%40ss@eureka:8761/eureka":   {base: "http://eureka:8761/eureka", host: "eureka", user: "svc", password: "p@ss"},
		"http://eureka:8761":                     {base: "http://eureka:8761", host: "eureka"},
		"http://[::1]:8761/eureka":               {base: "http://[::1]:8761/eureka", host: "::1"},
		"http://only-user@eureka/eureka":         {base: "http://eureka/eureka", host: "eureka", user: "only-user"},
	} {
		got, err := parseServerURL(raw)
		want.name = want.base
		if err != nil || got != want {
			t.Errorf("parseServerURL(%q) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	if _, err := parseServerURL("http://:p@eureka/eureka"); err == nil {
		t.Error("credentials without a user: no error")
	}
}

func TestBasicAuthFile(t *testing.T) {
	dir := t.TempDir()
	for content, ok := range map[string]bool{"u:p\n": true, "u:": true, ":p": false, "nocolon": false, "u:p\nu2:p2": false} {
		path := dir + "/auth"
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := Config{AuthFile: path}
		_, _, err := cfg.basicAuth()
		if (err == nil) != ok {
			t.Errorf("auth file %q: %v", content, err)
		}
		if err != nil && strings.Contains(err.Error(), "p2") {
			t.Errorf("the error shows the file's content: %v", err)
		}
	}
}

func TestRejectionsLoggedOnceAndBounded(t *testing.T) {
	r := newTestRegistry(t, Config{})
	rec := registrytest.NewRecorder()
	p := newPoller(r, rec)
	apps := &wire.Applications{}
	for i := range 50 {
		apps.Skipped = append(apps.Skipped, wire.Skipped{App: "BAD", InstanceID: "b-" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Reason: wire.ReasonPort, Err: bad(wire.ReasonPort, errors.New("no enabled port"))})
	}
	p.apps = apps
	p.reject()
	p.reject() // the same rejections again: not told again
	p.rec.Flush()
	n := 0
	for _, e := range rec.Events() {
		if e.Op == registrytest.OpRejected {
			n++
			if reason := registry.ReasonOf(e.Err, ""); reason != wire.ReasonPort {
				t.Errorf("%s rejected with reason %q, want %q", e.Record, reason, wire.ReasonPort)
			}
		}
	}
	if n != 50 {
		t.Errorf("%d rejections told after the same 50 twice, want 50", n)
	}
	p.apps = &wire.Applications{}
	p.reject()
	if len(p.told) != 0 {
		t.Errorf("told %v after every rejection cleared", slices.Collect(maps.Keys(p.told)))
	}
}

// TestFetchResults: fetch, the one function that reads a server's answer, on answers a server
// should not give (an httptest server stands in for one): each fails with the result it is
// counted under, and a gzipped listing is counted in wire and decoded bytes apart.
func TestFetchResults(t *testing.T) {
	listing := `{"applications":{"versions__delta":"1","apps__hashcode":"UP_1_","application":[{"name":"A","instance":[
{"instanceId":"a-1","app":"A","ipAddr":"10.0.0.1","hostName":"a","status":"UP","port":{"$":80,"@enabled":"true"}}]}]}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/eureka/apps/delta": // gzipped when asked
			w.Header().Set("Content-Type", "application/json")
			if strings.Contains(req.Header.Get("Accept-Encoding"), "gzip") {
				w.Header().Set("Content-Encoding", "gzip")
				zw := gzip.NewWriter(w)
				_, _ = zw.Write([]byte(listing))
				_ = zw.Close()
				return
			}
			_, _ = w.Write([]byte(listing))
		case "/bad/apps":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"applications": {"application": [`))
		case "/big/apps":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"applications":{"application":[` + strings.Repeat(" ", 4<<10) + `]}}`))
		default:
			http.Error(w, "no such thing", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	r := newTestRegistry(t, Config{URLs: []string{srv.URL + "/eureka"}, MaxBody: 2 << 10})
	hc := newHTTPClient(&r.cfg)
	defer hc.CloseIdleConnections()
	ctx := context.Background()
	f, err := r.fetch(ctx, hc, &server{base: srv.URL + "/eureka", name: "s"}, kindDelta)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.apps.Apps) != 1 || f.body != int64(len(listing)) || f.wire >= f.body {
		t.Errorf("gzipped delta: %d apps, %d bytes decoded (want %d), %d on the wire (want fewer)", len(f.apps.Apps), f.body, len(listing), f.wire)
	}
	for _, tc := range []struct{ base, result, says string }{
		{srv.URL + "/bad", resultMalformed, "GET s/apps"},
		{srv.URL + "/big", resultMalformed, "too large"},
		{srv.URL + "/none", resultStatus, "404 Not Found: no such thing"},
		{"http://127.0.0.1:1/eureka", resultUnreachable, "connection refused"},
	} {
		_, err := r.fetch(ctx, hc, &server{base: tc.base, name: "s"}, kindFull)
		if err == nil || resultOf(err) != tc.result || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v (result %s), want result %s saying %q", tc.base, err, resultOf(err), tc.result, tc.says)
		}
	}
}

// TestLocality: every rule of localityOf, and that no locality ever has a zone without a
// region.
func TestLocality(t *testing.T) {
	amazon := func(az string) wire.DataCenterInfo {
		return wire.DataCenterInfo{Name: "Amazon", Metadata: map[string]string{"availability-zone": az}}
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		dc   wire.DataCenterInfo
		meta map[string]string
		want string
	}{
		{name: "nothing", want: ""},
		{name: "Spring zone, no region: none", meta: map[string]string{"zone": "zone-a"}, want: ""},
		{name: "Spring zone, --eureka-region", cfg: Config{Region: "eu-west-1"}, meta: map[string]string{"zone": "zone-a"}, want: "eu-west-1/zone-a"},
		{name: "Spring zone and metadata region", cfg: Config{Region: "eu-west-1"}, meta: map[string]string{"zone": "zone-a", "region": "eu"}, want: "eu/zone-a"},
		{name: "Polaris's empty keys, --eureka-region", cfg: Config{Region: "eu-west-1"}, meta: map[string]string{"zone": "", "region": " ", "campus": ""}, want: "eu-west-1"},
		{name: "Polaris's empty keys, no region", meta: map[string]string{"zone": "", "region": "", "campus": ""}, want: ""},
		{name: "region only", meta: map[string]string{"region": "eu"}, want: "eu"},
		{name: "AWS zone in metadata", cfg: Config{Region: "eu-west-1"}, meta: map[string]string{"zone": "us-east-1b"}, want: "us-east-1/us-east-1b"},
		{name: "GovCloud zone in metadata", meta: map[string]string{"zone": "us-gov-west-1a"}, want: "us-gov-west-1/us-gov-west-1a"},
		{name: "AWS Local Zone in metadata", meta: map[string]string{"zone": "us-west-2-lax-1a"}, want: "us-west-2/us-west-2-lax-1a"},
		{name: "GCP zone in metadata", meta: map[string]string{"zone": "europe-west1-b"}, want: "europe-west1/europe-west1-b"},
		{name: "metadata region beats the zone's", meta: map[string]string{"zone": "us-east-1b", "region": "east"}, want: "east/us-east-1b"},
		{name: "Amazon dataCenterInfo", cfg: Config{Region: "eu-west-1"}, dc: amazon("ap-southeast-2c"), meta: map[string]string{"zone": "zone-a", "region": "x"}, want: "ap-southeast-2/ap-southeast-2c"},
		{name: "Amazon dataCenterInfo, odd zone, metadata region", dc: amazon("zz"), meta: map[string]string{"region": "x"}, want: "x/zz"},
		{name: "Amazon dataCenterInfo, odd zone, no region", dc: amazon("zz"), want: ""},
		{name: "other zone key", cfg: Config{ZoneKey: "az", Region: "r"}, meta: map[string]string{"az": "z1", "zone": "ignored"}, want: "r/z1"},
		{name: "other region key", cfg: Config{RegionKey: "dc"}, meta: map[string]string{"zone": "z1", "dc": "dc1", "region": "ignored"}, want: "dc1/z1"},
		{name: "a slash is no part", cfg: Config{Region: "r"}, meta: map[string]string{"zone": "a/b", "region": "x/y"}, want: "r"},
		{name: "Spring zone-like names hold no region", meta: map[string]string{"zone": "zone1"}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestRegistry(t, tc.cfg)
			in := upInstance("i-1", "10.0.0.1", 8080)
			in.DataCenterInfo, in.Metadata = tc.dc, tc.meta
			got := r.localityOf(&in)
			if got != tc.want {
				t.Errorf("locality %q, want %q", got, tc.want)
			}
			if strings.HasPrefix(got, "/") {
				t.Errorf("locality %q has a zone without a region", got)
			}
		})
	}
	// Through the mapping: the instance's Locality.
	r := newTestRegistry(t, Config{Region: "eu-west-1"})
	in := upInstance("i-1", "10.0.0.1", 8080)
	in.Metadata = map[string]string{"zone": "zone-a"}
	m := r.mapApplication(&wire.Application{Name: "ORDERS", Instances: []wire.Instance{in}}, time.Now())
	if !m.ok || m.svc.Instances[0].Locality != "eu-west-1/zone-a" {
		t.Errorf("mapped %+v", m.svc.Instances)
	}
	if _, err := New(Config{URLs: []string{"http://127.0.0.1:8761/eureka"}, Region: "eu/west"}); err == nil || !strings.Contains(err.Error(), "--eureka-region") {
		t.Errorf("--eureka-region eu/west: %v, want an error naming the flag", err)
	}
}

func TestCloudRegion(t *testing.T) {
	for zone, want := range map[string]string{
		"us-east-1a": "us-east-1", "eu-central-1c": "eu-central-1", "ap-northeast-3a": "ap-northeast-3",
		"us-gov-east-1b": "us-gov-east-1", "us-west-2-lax-1a": "us-west-2", "us-central1-a": "us-central1",
		"northamerica-northeast1-c": "northamerica-northeast1",
		"zone-a":                    "", "zone1": "", "us-east-1": "", "a": "", "": "", "US-EAST-1A": "", "eastus-1": "", "1": "",
	} {
		if got := cloudRegion(zone); got != want {
			t.Errorf("cloudRegion(%q) = %q, want %q", zone, got, want)
		}
	}
}

package eurekatest

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// hashcode is Netflix's apps__hashcode of a listing: for each status in name order,
// STATUS_count_ ("OUT_OF_SERVICE_1_UP_2_"); "" for no instances.
func hashcode(a *Applications) string {
	counts := map[string]int{}
	for _, app := range a.Application {
		for _, in := range app.Instance {
			counts[in.Status]++
		}
	}
	var statuses []string
	for st := range counts {
		statuses = append(statuses, st)
	}
	sort.Strings(statuses)
	var b strings.Builder
	for _, st := range statuses {
		fmt.Fprintf(&b, "%s_%d_", st, counts[st])
	}
	return b.String()
}

// xmlApplications is the XML listing, as far as the tests read it.
type xmlApplications struct {
	XMLName       xml.Name `xml:"applications"`
	VersionsDelta string   `xml:"versions__delta"`
	AppsHashcode  string   `xml:"apps__hashcode"`
	Application   []struct {
		Name     string `xml:"name"`
		Instance []struct {
			InstanceID string `xml:"instanceId"`
			IPAddr     string `xml:"ipAddr"`
			Status     string `xml:"status"`
			Port       struct {
				Value   int    `xml:",chardata"`
				Enabled string `xml:"enabled,attr"`
			} `xml:"port"`
			Metadata struct {
				Entries []struct {
					XMLName xml.Name
					Value   string `xml:",chardata"`
				} `xml:",any"`
			} `xml:"metadata"`
		} `xml:"instance"`
	} `xml:"application"`
}

func TestConfig(t *testing.T) {
	cfg, err := Config(18761, 18090, 18091, Options{DeltaExpireInterval: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"listenPort: 18761", "listenPort: 18090", "listenPort: 18091", "self_address: 127.0.0.1",
		"refreshInterval: 1\n", "diffTime: 1s\n", "deltaExpireInterval: 5\n", "- name: service-grpc",
		"- name: service-eureka", "path: ./polaris.bolt",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q", want)
		}
	}
	for _, bad := range []string{"0.0.0.0", "@LISTEN_IP@", "@EUREKA_PORT@", "@HTTP_PORT@", "@GRPC_PORT@", "15010", "8848", "8093", "xds-v3", "service-nacos", "config-grpc"} {
		for _, line := range strings.Split(cfg, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "#") && strings.Contains(line, bad) {
				t.Errorf("config line %q has %q", line, bad)
			}
		}
	}
	if n := strings.Count(cfg, "listenIP: \"127.0.0.1\""); n != 3 {
		t.Errorf("%d listenIP 127.0.0.1 lines, want 3 (one per apiserver)", n)
	}
	if _, err := Config(1, 2, 3, Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestStartEmptyStop(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := Start(t, Options{})
	t.Logf("polaris-server %s up at %s in %v", Version, s.BaseURL(), time.Since(start).Round(time.Millisecond))
	if !strings.HasPrefix(s.BaseURL(), "http://127.0.0.1:") || !strings.HasSuffix(s.BaseURL(), "/eureka") {
		t.Fatalf("BaseURL %q", s.BaseURL())
	}
	ctx := ctxT(t, 60*time.Second)

	r, err := s.Do(ctx, "GET", "/apps", "application/json", nil)
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET /apps: %+v, %v", r, err)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("JSON listing has Content-Type %q", ct)
	}
	var doc map[string]map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &doc); err != nil {
		t.Fatalf("JSON listing: %v: %s", err, r.Body)
	}
	apps, ok := doc["applications"]
	if !ok || string(apps["apps__hashcode"]) != `""` || string(apps["application"]) != "[]" {
		t.Errorf("empty JSON listing: %s", r.Body)
	}
	// versions__delta is a JSON string, as in Netflix's JSON.
	if v := string(apps["versions__delta"]); !strings.HasPrefix(v, `"`) {
		t.Errorf("versions__delta is %s, want a JSON string", v)
	}
	t.Logf("empty JSON listing: %s", strings.Join(strings.Fields(string(r.Body)), " "))

	for _, accept := range []string{"application/xml", ""} { // no Accept: XML, Eureka's default
		r, err := s.Do(ctx, "GET", "/apps", accept, nil)
		if err != nil || r.Status != http.StatusOK {
			t.Fatalf("GET /apps (Accept %q): %+v, %v", accept, r, err)
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/xml") {
			t.Errorf("Accept %q: Content-Type %q", accept, ct)
		}
		var x xmlApplications
		if err := xml.Unmarshal(r.Body, &x); err != nil || len(x.Application) != 0 || x.AppsHashcode != "" {
			t.Errorf("Accept %q: empty XML listing %+v, %v: %s", accept, x, err, r.Body)
		}
	}
	// /eureka/v2 is answered too (Netflix's own servers use it).
	r2, err := HTTPClient.Get("http://" + s.EurekaAddr + "/eureka/v2/apps")
	if err != nil || r2.StatusCode != http.StatusOK {
		t.Errorf("GET /eureka/v2/apps: %v, %v", r2, err)
	}
	if r2 != nil {
		r2.Body.Close()
	}

	pid := s.Pid()
	start = time.Now()
	s.Stop(t)
	t.Logf("stopped in %v", time.Since(start).Round(time.Millisecond))
	s.Stop(t) // idempotent
	if s.Running() || pid == 0 {
		t.Fatalf("running %v after Stop (pid %d)", s.Running(), pid)
	}
	if _, err := s.Do(ctx, "GET", "/apps", "", nil); err == nil {
		t.Fatal("stopped server still answers")
	}
}

func TestRegisterListOverrideCancel(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{})
	ctx := ctxT(t, 120*time.Second)
	const app = "GALLEON-TEST"
	ins := []Instance{
		{App: app, ID: "web-1", IPAddr: "10.0.0.1", Port: 8080, Metadata: map[string]string{"zone": "z1", "version": "v1"}},
		{App: app, ID: "web-2", IPAddr: "10.0.0.2", Port: 8081, SecurePort: 8443},
		{App: "other", ID: "other-1", IPAddr: "10.0.1.1", Port: 9090},
	}
	for _, in := range ins {
		if err := s.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	all, err := s.WaitApps(ctx, "/apps", func(a *Applications) bool { return a.Count() == 3 })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3 registrations listed after %v", time.Since(start).Round(time.Millisecond))
	w1 := all.Find(app, "web-1")
	if w1 == nil || w1.IPAddr != "10.0.0.1" || w1.Port != (PortInfo{8080, true}) || w1.Status != "UP" ||
		w1.App != app || w1.VIPAddress != "galleon-test" || w1.Metadata["zone"] != "z1" || w1.Metadata["version"] != "v1" {
		t.Errorf("web-1 listed as %+v", w1)
	}
	if w2 := all.Find(app, "web-2"); w2 == nil || w2.SecurePort != (PortInfo{8443, true}) || w2.Port != (PortInfo{8081, true}) {
		t.Errorf("web-2 listed as %+v", w2)
	}
	if o := all.Find("OTHER", "other-1"); o == nil || o.App != "OTHER" {
		t.Errorf("other-1 listed as %+v (app names are upper-cased)", o)
	}
	if all.AppsHashcode != "UP_3_" || all.AppsHashcode != hashcode(all) {
		t.Errorf("apps__hashcode %q, want UP_3_", all.AppsHashcode)
	}

	// The same listing in XML.
	r, err := s.Do(ctx, "GET", "/apps", "application/xml", nil)
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET /apps XML: %+v, %v", r, err)
	}
	var x xmlApplications
	if err := xml.Unmarshal(r.Body, &x); err != nil {
		t.Fatalf("XML listing: %v: %s", err, r.Body)
	}
	found := false
	for _, a := range x.Application {
		for _, in := range a.Instance {
			if a.Name == app && in.InstanceID == "web-1" {
				found = true
				meta := map[string]string{}
				for _, e := range in.Metadata.Entries {
					meta[e.XMLName.Local] = e.Value
				}
				if in.Port.Value != 8080 || in.Port.Enabled != "true" || in.IPAddr != "10.0.0.1" || in.Status != "UP" || meta["zone"] != "z1" {
					t.Errorf("XML web-1: %+v, metadata %v", in, meta)
				}
			}
		}
	}
	if !found || x.AppsHashcode != "UP_3_" {
		t.Errorf("XML listing: web-1 found %v, apps__hashcode %q: %s", found, x.AppsHashcode, r.Body)
	}

	// The delta lists the registrations as ADDED.
	delta, err := s.WaitApps(ctx, "/apps/delta", func(a *Applications) bool {
		in := a.Find(app, "web-2")
		return in != nil && in.ActionType == "ADDED"
	})
	if err != nil {
		t.Fatal(err)
	}
	if delta.AppsHashcode != "UP_3_" {
		t.Errorf("delta apps__hashcode %q, want the full registry's UP_3_", delta.AppsHashcode)
	}

	// A status override: web-1 OUT_OF_SERVICE, in the listing, the hashcode, the delta and the
	// instance itself.
	if err := s.SetStatus(ctx, app, "web-1", "OUT_OF_SERVICE"); err != nil {
		t.Fatal(err)
	}
	all, err = s.WaitApps(ctx, "/apps", func(a *Applications) bool {
		in := a.Find(app, "web-1")
		return in != nil && in.Status == "OUT_OF_SERVICE"
	})
	if err != nil {
		t.Fatal(err)
	}
	if all.AppsHashcode != "OUT_OF_SERVICE_1_UP_2_" || all.AppsHashcode != hashcode(all) {
		t.Errorf("apps__hashcode after the override %q, want OUT_OF_SERVICE_1_UP_2_", all.AppsHashcode)
	}
	t.Logf("web-1 after the override: status %s, overriddenStatus %s", all.Find(app, "web-1").Status, all.Find(app, "web-1").OverriddenStatus)
	if _, err := s.WaitApps(ctx, "/apps/delta", func(a *Applications) bool {
		in := a.Find(app, "web-1")
		return in != nil && in.Status == "OUT_OF_SERVICE" && in.ActionType == "MODIFIED"
	}); err != nil {
		t.Fatal(err)
	}
	r, err = s.Do(ctx, "GET", "/apps/"+app+"/web-1", "application/json", nil)
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET /apps/%s/web-1: %+v, %v", app, r, err)
	}
	var one struct{ Instance InstanceInfo }
	if err := json.Unmarshal(r.Body, &one); err != nil || one.Instance.InstanceID != "web-1" || one.Instance.Status != "OUT_OF_SERVICE" {
		t.Errorf("GET /apps/%s/web-1: %+v, %v: %s", app, one, err, r.Body)
	}
	if err := s.ClearStatus(ctx, app, "web-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitApps(ctx, "/apps", func(a *Applications) bool { return a.AppsHashcode == "UP_3_" }); err != nil {
		t.Fatalf("after removing the override: %v", err)
	}

	// Cancel web-2: gone from the listing, DELETED in the delta, 404 on its own.
	if err := s.Cancel(ctx, app, "web-2"); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	all, err = s.WaitApps(ctx, "/apps", func(a *Applications) bool { return a.Find(app, "web-2") == nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cancel listed after %v", time.Since(start).Round(time.Millisecond))
	if all.Count() != 2 || all.Find(app, "web-1") == nil || all.AppsHashcode != "UP_2_" || all.AppsHashcode != hashcode(all) {
		t.Errorf("after the cancel: %d instances, apps__hashcode %q, want 2 and UP_2_", all.Count(), all.AppsHashcode)
	}
	if _, err := s.WaitApps(ctx, "/apps/delta", func(a *Applications) bool {
		in := a.Find(app, "web-2")
		return in != nil && in.ActionType == "DELETED"
	}); err != nil {
		t.Fatal(err)
	}
	r, err = s.Do(ctx, "GET", "/apps/"+app+"/web-2", "application/json", nil)
	if err != nil || r.Status != http.StatusNotFound {
		t.Errorf("GET a cancelled instance: %+v, %v; want 404", r, err)
	}
}

func TestRestartAndKillKeepRegistry(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{})
	ctx := ctxT(t, 120*time.Second)
	if err := s.Register(ctx, Instance{App: "keep", ID: "keep-1", IPAddr: "10.0.2.1", Port: 7000}); err != nil {
		t.Fatal(err)
	}
	present := func(a *Applications) bool { return a.Find("KEEP", "keep-1") != nil }
	if _, err := s.WaitApps(ctx, "/apps", present); err != nil {
		t.Fatal(err)
	}
	addr := s.EurekaAddr
	start := time.Now()
	s.Restart(t)
	t.Logf("restart (SIGTERM, start) took %v", time.Since(start).Round(time.Millisecond))
	if s.EurekaAddr != addr {
		t.Fatalf("EurekaAddr moved from %s to %s", addr, s.EurekaAddr)
	}
	if _, err := s.WaitApps(ctx, "/apps", present); err != nil {
		t.Fatalf("after Restart: %v", err)
	}

	s.Kill(t)
	if s.Running() {
		t.Fatal("running after Kill")
	}
	if _, err := s.Do(ctx, "GET", "/apps", "", nil); err == nil {
		t.Fatal("killed server still answers")
	}
	start = time.Now()
	s.Restart(t)
	t.Logf("start after SIGKILL took %v", time.Since(start).Round(time.Millisecond))
	a, err := s.WaitApps(ctx, "/apps", present)
	if err != nil {
		t.Fatalf("after Kill and Restart: %v", err)
	}
	if in := a.Find("KEEP", "keep-1"); in.Port != (PortInfo{7000, true}) || in.IPAddr != "10.0.2.1" {
		t.Errorf("keep-1 after Kill and Restart: %+v", in)
	}
}

package wire

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// waitHosts polls Instances until ref has n hosts (Polaris's cache refreshes every second).
func waitHosts(t *testing.T, ctx context.Context, c *HTTPClient, ref Ref, udpPort, n int) *ServiceInfo {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		info, err := c.Instances(ctx, ref, udpPort)
		if err != nil {
			t.Fatalf("Instances(%v): %v", ref, err)
		}
		if len(info.Hosts) == n {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("Instances(%v): %d hosts after 15 s, want %d: %+v", ref, len(info.Hosts), n, info)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestPolarisHTTP(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server")
	s := nacostest.Start(t, nacostest.Options{})
	base := s.BaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := NewHTTPClient(HTTPConfig{BaseURL: base, Timeout: 5 * time.Second, ClientIP: "127.0.0.1"})
	defer c.Close()

	a := Ref{Group: "DEFAULT_GROUP", Service: "svc-a"}
	b := Ref{Group: "G1", Service: "svc-b"}
	n := Ref{Namespace: "ns1", Group: "DEFAULT_GROUP", Service: "svc-n"}
	register(t, s, a, "10.0.0.1", 8080, map[string]string{"k": "v"})
	register(t, s, b, "10.0.0.2", 8080, map[string]string{"k": "v"})
	register(t, s, n, "10.0.0.3", 8080, map[string]string{"k": "v"})

	t.Run("Instances", func(t *testing.T) {
		for _, ref := range []Ref{a, b, n} {
			info := waitHosts(t, ctx, c, ref, 0, 1)
			h := info.Hosts[0]
			if h.Port != 8080 || h.Metadata["k"] != "v" || !h.Enabled || info.GroupName != ref.Group ||
				info.Name != ref.Group+"@@"+ref.Service || info.CacheMillis <= 0 {
				t.Errorf("%v: %+v", ref, info)
			}
			t.Logf("%v: cacheMillis %d, name %q, host %+v", ref, info.CacheMillis, info.Name, h)
		}
	})

	t.Run("ListServices", func(t *testing.T) {
		// Polaris lists every group's services under DEFAULT_GROUP, the others' names as
		// "group__name", and counts the namespace's services, not the group's
		// (apiserver/nacosserver/model/service.go HandleServiceListRequest).
		page, err := c.ListServices(ctx, "", "DEFAULT_GROUP", 1, 100)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(page.Names, "svc-a") || !slices.Contains(page.Names, "G1__svc-b") {
			t.Errorf("DEFAULT_GROUP page: %+v", page)
		}
		g1, err := c.ListServices(ctx, "", "G1", 1, 100)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(g1.Names, ",") != "svc-b" || g1.Count != page.Count {
			t.Errorf("G1 page: %+v (DEFAULT_GROUP count %d)", g1, page.Count)
		}
		ns1, err := c.ListServices(ctx, "ns1", "DEFAULT_GROUP", 1, 100)
		if err != nil || strings.Join(ns1.Names, ",") != "svc-n" || ns1.Count != 1 {
			t.Errorf("ns1 page: %+v, %v", ns1, err)
		}
		// Paging: one name a page. Polaris lists a namespace's services in map order, which
		// changes from one request to the next, so pages may repeat a name and miss another:
		// only a page holding the whole count is a consistent listing.
		seen := map[string]bool{}
		for p := 1; p <= page.Count; p++ {
			pg, err := c.ListServices(ctx, "", "DEFAULT_GROUP", p, 1)
			if err != nil {
				t.Fatalf("page %d: %v", p, err)
			}
			if len(pg.Names) != 1 || !slices.Contains(page.Names, pg.Names[0]) || pg.Count != page.Count {
				t.Errorf("page %d of one: %+v", p, pg)
			}
			for _, n := range pg.Names {
				seen[n] = true
			}
		}
		t.Logf("pages of one saw %d of %d names", len(seen), page.Count)
		// A page of a non-default group past its end: Polaris slices the group's names with
		// the namespace's count, padding with "" within the slice's capacity (dropped by the
		// decoder) or panicking beyond it (the connection drops: a transport error).
		g1p2, err := c.ListServices(ctx, "", "G1", 2, 1)
		if IsServerError(err) || err == nil && len(g1p2.Names) != 0 {
			t.Errorf("G1 page 2 of 1: %+v, %v", g1p2, err)
		}
		t.Logf("G1 page 2 of 1: %+v, %v", g1p2, err)
		g1p2of2, err := c.ListServices(ctx, "", "G1", 2, 2)
		t.Logf("G1 page 2 of 2: %+v, %v", g1p2of2, err)
		if err == nil || IsServerError(err) {
			t.Errorf("G1 page 2 of 2: %+v, %v; want the dropped connection of Polaris 1.18.1's panic", g1p2of2, err)
		}
	})

	t.Run("Namespaces", func(t *testing.T) {
		_, err := c.Namespaces(ctx)
		if !IsNotFound(err) {
			t.Errorf("Namespaces: %v; Polaris 1.18.1 does not serve /v1/console/namespaces", err)
		}
	})

	t.Run("Login", func(t *testing.T) {
		// Auth off: Polaris's login verifies nothing and answers the password it read as the
		// token; it reads the query only, so a form body's password comes back as "".
		tok, ttl, err := c.Login(ctx, "nacos", "not-a-secret")
		if err != nil || tok != "" || ttl != 120*time.Second {
			t.Errorf("Login = %q, %v, %v; want \"\", 2m0s", tok, ttl, err)
		}
	})

	t.Run("UDPPushNeverArrives", func(t *testing.T) {
		// Polaris 1.18.1 registers the subscriber and tries to push, but its sender cannot
		// send: it binds its listening port again (bind: address already in use) and takes the
		// clientIP's text for the bytes of an IP (v1/discover/upd_push.go). In the default
		// namespace it does not even try (the subscriber is stored under "default", the change
		// under "public"). So the 1.x watch on Polaris is the poll alone.
		for _, ref := range []Ref{a, n} {
			pushes := make(chan *ServiceInfo, 4)
			l, err := ListenPush(ctx, "127.0.0.1:0", func(_ Ref, info *ServiceInfo) { pushes <- info }, PushNamespace(ref.Namespace))
			if err != nil {
				t.Fatal(err)
			}
			info := waitHosts(t, ctx, c, ref, l.Port(), 1)
			register(t, s, ref, "10.0.1.9", 8080, map[string]string{"k": "v"})
			polled := time.Now()
			changed := waitHosts(t, ctx, c, ref, l.Port(), 2)
			t.Logf("%v: the poll saw the change %v after the registration answered (lastRefTime %d -> %d)",
				ref, time.Since(polled).Round(time.Millisecond), info.LastRefTime, changed.LastRefTime)
			select {
			case p := <-pushes:
				t.Errorf("%v: a UDP push arrived (%+v): Polaris's push works now; update the docs", ref, p)
			case <-time.After(3 * time.Second):
			}
			st := l.Stats()
			_ = l.Close()
			if st.Received != 0 {
				t.Errorf("%v: %d datagrams received", ref, st.Received)
			}
		}
	})
}

// With client authentication on, Polaris 1.18.1's Nacos login cannot succeed: its handler
// verifies a token it never puts into the request's context (apiserver/nacosserver/v1/auth.go
// handleLogin; ParseHeaderContext sets no token; defaultauth VerifyCredential then fails with
// "invalid token"), whatever the form, query or header holds. Its 1.x naming API checks no
// token at all.
func TestPolarisHTTPLoginWithAuth(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server")
	s := nacostest.Start(t, nacostest.Options{Auth: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := NewHTTPClient(HTTPConfig{BaseURL: s.BaseURL(), Timeout: 5 * time.Second})
	_, _, err := c.Login(ctx, s.Username, s.Password)
	var se *ServerError
	if !errors.As(err, &se) || se.Code != 500 || !strings.Contains(se.Message, "invalid token") {
		t.Errorf("Login with Polaris's admin token as the password: %v; want Polaris 1.18.1's 500 invalid token", err)
	}
	if err != nil && strings.Contains(err.Error(), s.Password) {
		t.Fatalf("error holds the password: %v", err)
	}
	// The same credentials in the query, and the token as accessToken and as Polaris's header.
	q := url.Values{"username": {s.Username}, "password": {s.Password}, "accessToken": {s.Password}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.BaseURL()+"/v1/auth/users/login?"+q.Encode(), nil)
	req.Header.Set("X-Polaris-Token", s.Password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	if resp.StatusCode != 500 {
		t.Errorf("login with the credentials in the query and headers: %d %q; Polaris's login works now: update the docs", resp.StatusCode, body)
	}
	// The naming API answers without a token.
	if _, err := c.ListServices(ctx, "", "DEFAULT_GROUP", 1, 10); err != nil {
		t.Errorf("ListServices without a token, auth on: %v", err)
	}
	if _, err := c.Instances(ctx, Ref{Group: "DEFAULT_GROUP", Service: "nothing"}, 0); err != nil {
		t.Errorf("Instances without a token, auth on: %v", err)
	}
}

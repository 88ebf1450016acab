package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

type pushed struct {
	ref  Ref
	info *ServiceInfo
}

// dialFake dials f under a goroutine label; the returned Conn is closed, and its goroutines
// checked gone, at the test's end.
func dialFake(t *testing.T, f *fakeServer, cfg DialConfig) *Conn {
	t.Helper()
	cfg.Address = f.addr
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	var c *Conn
	var err error
	check := withGoroutineLabel(t, "conn", func() { c, err = Dial(context.Background(), cfg) })
	if err != nil {
		check()
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		check()
	})
	return c
}

func TestDialSequence(t *testing.T) {
	f := newFakeServer(t)
	f.setupDelay = 200 * time.Millisecond // Nacos answers 301 meanwhile
	start := time.Now()
	c := dialFake(t, f, DialConfig{ClientVersion: "Galleon:test"})
	took := time.Since(start)
	if c.ID() != "fake-conn-1" {
		t.Errorf("ID = %q, want the ServerCheckResponse's connectionId", c.ID())
	}
	if took < f.setupDelay {
		t.Errorf("Dial returned after %v, before the server registered the connection (%v)", took, f.setupDelay)
	}
	got := f.received()
	if len(got) < 3 || got[0].Type != typeServerCheckRequest {
		t.Fatalf("requests %v: want ServerCheckRequest first, then health checks", types(got))
	}
	for _, p := range got[1:] {
		if p.Type != typeHealthCheckRequest {
			t.Errorf("request %s during Dial, want only HealthCheckRequest after ServerCheckRequest", p.Type)
		}
	}
	f.mu.Lock()
	setup := f.setup
	f.mu.Unlock()
	if setup.ClientVersion != "Galleon:test" || setup.Labels["source"] != "sdk" || setup.Labels["module"] != "naming" {
		t.Errorf("ConnectionSetupRequest = %+v", setup)
	}
	select {
	case <-c.Done():
		t.Fatalf("Done closed after Dial: %v", c.Err())
	default:
	}
	if c.Err() != nil {
		t.Errorf("Err = %v before Done", c.Err())
	}
}

func types(ps []*Payload) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Type)
	}
	return out
}

func TestDialFailsOnServerCheckError(t *testing.T) {
	f := newFakeServer(t)
	f.on(typeServerCheckRequest, func(*Payload) *Payload {
		return jsonPayload(typeErrorResponse, response{ResultCode: 500, ErrorCode: 302, Message: "server is starting"})
	})
	var err error
	check := withGoroutineLabel(t, "dial", func() {
		_, err = Dial(context.Background(), DialConfig{Address: f.addr, Timeout: time.Second})
	})
	var se *ServerError
	if !errors.As(err, &se) || se.Code != 302 {
		t.Fatalf("Dial = %v, want a ServerError 302", err)
	}
	check()
}

func TestDialUnreachable(t *testing.T) {
	f := newFakeServer(t)
	f.stop()
	var err error
	check := withGoroutineLabel(t, "dial", func() {
		_, err = Dial(context.Background(), DialConfig{Address: f.addr, Timeout: 500 * time.Millisecond})
	})
	if err == nil || IsServerError(err) {
		t.Fatalf("Dial to a stopped server = %v, want a connection error that is not a ServerError", err)
	}
	check()
}

func TestSubscribeAndPush(t *testing.T) {
	f := newFakeServer(t)
	pushes := make(chan pushed, 4)
	c := dialFake(t, f, DialConfig{OnPush: func(ref Ref, info *ServiceInfo) { pushes <- pushed{ref, info} }})

	var sub subscribeServiceRequest
	f.on(typeSubscribeServiceRequest, func(p *Payload) *Payload {
		_ = json.Unmarshal(p.Body, &sub)
		// Polaris leaves success false in a successful SubscribeServiceResponse.
		return &Payload{Type: typeSubscribeServiceResponse, Body: []byte(`{"resultCode":200,"success":false,"serviceInfo":` +
			`{"name":"svc","groupName":"DEFAULT_GROUP","hosts":[{"ip":"10.0.0.1","port":80,"healthy":true,"enabled":true,"metadata":{"a":"b"}}],` +
			`"reachProtectThreshold":true}}`)}
	})
	info, err := c.Subscribe(context.Background(), Ref{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Namespace != "public" || sub.GroupName != "DEFAULT_GROUP" || sub.ServiceName != "svc" || !sub.Subscribe {
		t.Errorf("SubscribeServiceRequest = %+v, want public/DEFAULT_GROUP/svc subscribe", sub)
	}
	if len(info.Hosts) != 1 || info.Hosts[0].Metadata["a"] != "b" || !info.ReachProtectionThreshold {
		t.Errorf("Subscribe = %+v", info)
	}

	f.push(t, &Payload{Type: typeNotifySubscriberRequest, Body: []byte(`{"requestId":"r1","namespace":"public",` +
		`"serviceName":"svc","groupName":"DEFAULT_GROUP","serviceInfo":{"name":"svc","hosts":[{"ip":"10.0.0.2","port":81}]}}`)})
	ack := f.next(t)
	var r response
	_ = json.Unmarshal(ack.Body, &r)
	if ack.Type != typeNotifySubscriberResponse || r.RequestID != "r1" || r.ResultCode != 200 {
		t.Errorf("ack %s %s, want NotifySubscriberResponse r1 200", ack.Type, ack.Body)
	}
	select {
	case p := <-pushes:
		if p.ref != (Ref{Group: "DEFAULT_GROUP", Service: "svc"}) || len(p.info.Hosts) != 1 || p.info.Hosts[0].IP != "10.0.0.2" {
			t.Errorf("OnPush(%+v, %+v)", p.ref, p.info)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no OnPush")
	}

	// A push that cannot be read is answered with a failure and does not end the connection.
	f.push(t, &Payload{Type: typeNotifySubscriberRequest, Body: []byte(`{"requestId":"r2","serviceInfo":{"hosts":7}}`)})
	ack = f.next(t)
	r = response{}
	_ = json.Unmarshal(ack.Body, &r)
	if ack.Type != typeNotifySubscriberResponse || r.RequestID != "r2" || r.ResultCode != 500 {
		t.Errorf("ack of a bad push %s %s, want NotifySubscriberResponse r2 500", ack.Type, ack.Body)
	}
	select {
	case p := <-pushes:
		t.Errorf("OnPush of a bad push: %+v", p)
	default:
	}

	if err := c.Unsubscribe(context.Background(), Ref{Service: "svc"}); err != nil || sub.Subscribe {
		t.Errorf("Unsubscribe = %v, request %+v", err, sub)
	}
}

func TestServerPushes(t *testing.T) {
	f := newFakeServer(t)
	var logs syncBuffer
	c := dialFake(t, f, DialConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	f.push(t, &Payload{Type: typeClientDetectionRequest, Body: []byte(`{"requestId":"d1"}`)})
	ack := f.next(t)
	if ack.Type != typeClientDetectionResponse || !strings.Contains(string(ack.Body), `"requestId":"d1"`) {
		t.Errorf("answer to ClientDetectionRequest: %s %s", ack.Type, ack.Body)
	}

	for i := range 20 {
		f.push(t, &Payload{Type: "SomeFutureRequest", Body: []byte(`{"requestId":"u` + string(rune('a'+i)) + `"}`)})
		ack = f.next(t)
		if ack.Type != typeErrorResponse || !strings.Contains(string(ack.Body), `"requestId":"u`+string(rune('a'+i))+`"`) {
			t.Fatalf("answer to an unknown request: %s %s", ack.Type, ack.Body)
		}
	}
	if n := strings.Count(logs.String(), "does not handle"); n != maxUnknownLogs {
		t.Errorf("%d log lines about 20 unknown requests, want %d", n, maxUnknownLogs)
	}
	select {
	case <-c.Done():
		t.Fatalf("connection ended: %v", c.Err())
	default:
	}

	f.push(t, &Payload{Type: typeConnectResetRequest, Body: []byte(`{"requestId":"x1","serverIp":"10.1.1.1","serverPort":"8848"}`)})
	ack = f.next(t)
	if ack.Type != typeConnectResetResponse {
		t.Errorf("answer to ConnectResetRequest: %s", ack.Type)
	}
	select {
	case <-c.Done():
		if !errors.Is(c.Err(), ErrConnectionReset) {
			t.Errorf("Err = %v, want ErrConnectionReset", c.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ConnectResetRequest did not end the connection")
	}
	if _, err := c.Subscribe(context.Background(), Ref{Service: "x"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Subscribe after the reset = %v, want ErrClosed", err)
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestErrorResponses(t *testing.T) {
	f := newFakeServer(t)
	c := dialFake(t, f, DialConfig{})
	long := strings.Repeat("x", 10000) + "\n\x1b[31m"
	f.on(typeSubscribeServiceRequest, func(*Payload) *Payload {
		return jsonPayload(typeErrorResponse, response{ResultCode: 500, ErrorCode: 20004, Message: long})
	})
	_, err := c.Subscribe(context.Background(), Ref{Service: "svc"})
	var se *ServerError
	if !errors.As(err, &se) || se.Code != 20004 {
		t.Fatalf("Subscribe = %v, want ServerError 20004", err)
	}
	if len(se.Message) > maxErrorMessage+len("…") || strings.ContainsAny(se.Message, "\n\x1b") {
		t.Errorf("message not bounded or not cleaned: %d bytes %q", len(se.Message), se.Message[len(se.Message)-10:])
	}

	// A failed response of the request's own type (Nacos's auth filter answers so) is an error too.
	f.on(typeServiceListRequest, func(*Payload) *Payload {
		return jsonPayload(typeServiceListResponse, response{ResultCode: 500, ErrorCode: 403, Message: "no right"})
	})
	if _, err := c.ListServices(context.Background(), "", "", 1, 10); !errors.As(err, &se) || se.Code != 403 {
		t.Errorf("ListServices = %v, want ServerError 403", err)
	}

	// An answer beyond the limits is a DecodeError naming the limit.
	f.on(typeSubscribeServiceRequest, func(*Payload) *Payload {
		return &Payload{Type: typeSubscribeServiceResponse, Body: []byte(`{"resultCode":200,"serviceInfo":{"hosts":[{},{},{}]}}`)}
	})
	c.cfg.Limits.MaxInstances = 2
	_, err = c.Subscribe(context.Background(), Ref{Service: "svc"})
	var de *DecodeError
	if !errors.As(err, &de) || !strings.Contains(de.Reason, "more than 2 instances") {
		t.Errorf("Subscribe of 3 instances with a limit of 2 = %v, want a DecodeError naming the limit", err)
	}
}

func TestMaxMessageBytes(t *testing.T) {
	f := newFakeServer(t)
	c := dialFake(t, f, DialConfig{MaxMessageBytes: 4096})
	f.on(typeSubscribeServiceRequest, func(*Payload) *Payload {
		return &Payload{Type: typeSubscribeServiceResponse, Body: []byte(`{"resultCode":200,"message":"` + strings.Repeat("x", 8192) + `"}`)}
	})
	_, err := c.Subscribe(context.Background(), Ref{Service: "svc"})
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("Subscribe of an 8 KiB answer with a 4 KiB limit = %v, want a DecodeError", err)
	}
}

func TestRequestTimeout(t *testing.T) {
	f := newFakeServer(t)
	release := make(chan struct{})
	defer close(release)
	c := dialFake(t, f, DialConfig{Timeout: 300 * time.Millisecond})
	f.on(typeSubscribeServiceRequest, func(*Payload) *Payload {
		<-release
		return nil
	})
	start := time.Now()
	_, err := c.Subscribe(context.Background(), Ref{Service: "svc"})
	if err == nil || IsServerError(err) || time.Since(start) > 2*time.Second {
		t.Fatalf("Subscribe to a hung server = %v after %v, want a timeout near 300ms", err, time.Since(start))
	}
}

func TestCloseEndsCallsInFlight(t *testing.T) {
	f := newFakeServer(t)
	release := make(chan struct{})
	defer close(release)
	c := dialFake(t, f, DialConfig{Timeout: time.Minute})
	f.on(typeSubscribeServiceRequest, func(*Payload) *Payload {
		<-release
		return nil
	})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Subscribe(context.Background(), Ref{Service: "svc"})
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	_ = c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Subscribe ended by Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a call in flight")
	}
	if !errors.Is(c.Err(), ErrClosed) {
		t.Errorf("Err after Close = %v", c.Err())
	}
	_ = c.Close() // idempotent
}

func TestHealthCheckFailureEndsConnection(t *testing.T) {
	f := newFakeServer(t)
	c := dialFake(t, f, DialConfig{Timeout: 200 * time.Millisecond, healthEvery: 50 * time.Millisecond})
	var mu sync.Mutex
	fail := false
	f.on(typeHealthCheckRequest, func(*Payload) *Payload {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return jsonPayload(typeErrorResponse, response{ResultCode: 500, ErrorCode: 500, Message: "unhealthy"})
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	select {
	case <-c.Done():
		t.Fatalf("ended while healthy: %v", c.Err())
	default:
	}
	mu.Lock()
	fail = true
	mu.Unlock()
	select {
	case <-c.Done():
		if !strings.Contains(c.Err().Error(), "health checks failed") {
			t.Errorf("Err = %v", c.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("failing health checks did not end the connection")
	}
}

func TestServerStopEndsConnection(t *testing.T) {
	f := newFakeServer(t)
	c := dialFake(t, f, DialConfig{})
	f.stop()
	select {
	case <-c.Done():
		if c.Err() == nil || errors.Is(c.Err(), ErrClosed) {
			t.Errorf("Err = %v, want the loss", c.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stopped server did not end the connection")
	}
}

func TestAuthHeaders(t *testing.T) {
	f := newFakeServer(t)
	logins := 0
	var mu sync.Mutex
	tokens := NewTokenSource(func(context.Context) (string, time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		logins++
		return "tok" + string(rune('0'+logins)), time.Hour, nil
	})
	c := dialFake(t, f, DialConfig{Tokens: tokens, AccessKey: "AK", SecretKey: "SECRET"})
	var refuse bool
	f.on(typeSubscribeServiceRequest, func(*Payload) *Payload {
		if refuse {
			refuse = false
			return jsonPayload(typeSubscribeServiceResponse, response{ResultCode: 500, ErrorCode: 403, Message: "token invalid"})
		}
		return nil
	})
	if _, err := c.Subscribe(context.Background(), Ref{Group: "g", Service: "svc"}); err != nil {
		t.Fatal(err)
	}
	got := f.received()
	last := got[len(got)-1]
	h := last.Headers
	if h["accessToken"] != "tok1" || h["ak"] != "AK" || !strings.HasSuffix(h["data"], "@@g@@svc") || h["signature"] == "" {
		t.Errorf("Subscribe headers %v", h)
	}
	if strings.Contains(string(last.Body), "tok1") || strings.Contains(string(last.Body), "SECRET") {
		t.Errorf("credentials in the body: %s", last.Body)
	}
	for _, p := range got {
		if p.Type == typeHealthCheckRequest && p.Headers["accessToken"] != "tok1" {
			t.Errorf("health check headers %v, want the access token", p.Headers)
		}
	}
	// A refused token is dropped: the next request logs in again.
	refuse = true
	_, err := c.Subscribe(context.Background(), Ref{Group: "g", Service: "svc"})
	if err == nil || strings.Contains(err.Error(), "tok1") {
		t.Fatalf("Subscribe with a refused token = %v", err)
	}
	if _, err := c.Subscribe(context.Background(), Ref{Group: "g", Service: "svc"}); err != nil {
		t.Fatal(err)
	}
	got = f.received()
	if tok := got[len(got)-1].Headers["accessToken"]; tok != "tok2" {
		t.Errorf("token after a 403 = %q, want a new login's tok2", tok)
	}
}

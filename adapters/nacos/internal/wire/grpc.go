package wire

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// The two methods of nacos_grpc_service.proto (no proto package, so the service names are bare).
const (
	methodRequest  = "/Request/request"
	methodBiStream = "/BiRequestStream/requestBiStream"
)

var biStreamDesc = grpc.StreamDesc{StreamName: "requestBiStream", ServerStreams: true, ClientStreams: true}

const (
	// healthCheckInterval is the official clients' keepAliveTime (RpcClient: 5 s): a
	// HealthCheckRequest that often keeps Polaris from ejecting the connection (it ejects after
	// 20 s without a request or push ack: remote/client_conn.go ejectOutdateConnection) and
	// detects a dead server sooner than TCP would.
	healthCheckInterval = 5 * time.Second
	// healthCheckAttempts is how many health checks in a row (each bounded by Timeout) may fail
	// before the connection is given up. The Go client reconnects after one failure
	// (rpc_client.go healthCheck, sendHealthCheck); one more round trip or two costs little and
	// spares a resubscription of everything over a lost packet.
	healthCheckAttempts = 3
	// setupSettle is how long Dial waits at least after sending ConnectionSetupRequest, as the
	// official Go client does (grpc_client.go sendConnectionSetupRequest sleeps 100 ms): the
	// server answers nothing to it.
	setupSettle = 100 * time.Millisecond
	// setupRetry is the pause between health checks while Nacos still answers 301 (the
	// connection is not registered yet).
	setupRetry = 50 * time.Millisecond
	// maxUnknownLogs bounds the log lines about pushes this client does not know or cannot
	// read, per connection: the server chooses how many it sends.
	maxUnknownLogs = 8
	defaultTimeout = 3 * time.Second
	// defaultMaxMessageBytes is the official Go client's default
	// (nacos.remote.client.grpc.maxinbound.message.size: 10 MiB).
	defaultMaxMessageBytes = 10 << 20
)

// ErrClosed is Conn.Err after Close.
var ErrClosed = errors.New("nacos: connection closed")

// ErrConnectionReset is (wrapped in) Conn.Err when the server sent ConnectResetRequest: it asks
// the client to reconnect, possibly to another server.
var ErrConnectionReset = errors.New("nacos: server asked the client to reconnect (ConnectResetRequest)")

// DialConfig configures a Nacos 2 gRPC connection.
type DialConfig struct {
	Address         string        // host:port of the server's gRPC port (HTTP port + 1000)
	TLS             *tls.Config   // nil: plaintext
	Timeout         time.Duration // per request (and the connection setup); 0: 3 s
	MaxMessageBytes int           // largest message accepted from the server; 0: 10 MiB
	Tokens          *TokenSource  // nil: no username/password auth
	// AccessKey and SecretKey sign every naming request ("": off).
	AccessKey, SecretKey string
	ClientVersion        string // sent in ConnectionSetupRequest, e.g. "Galleon:v1"
	Logger               *slog.Logger
	// OnPush is called from the connection's reader goroutine, one call at a time, for every
	// NotifySubscriberRequest (after the ack is sent). It must not block: copy and signal.
	// info is the callee's.
	OnPush func(ref Ref, info *ServiceInfo)
	// Limits bounds what the decoders accept; zero fields take DefaultLimits.
	Limits Limits

	// tap, in tests, sees the bytes of every payload the server sends (responses and pushes).
	tap func(raw []byte)
	// healthEvery, in tests, replaces healthCheckInterval.
	healthEvery time.Duration
}

// Conn is one Nacos 2 connection: a gRPC connection, the server's connection ID, the bi-stream
// on which the server pushes, a reader goroutine and a health-check goroutine.
type Conn struct {
	cfg    DialConfig
	log    *slog.Logger
	cc     *grpc.ClientConn
	id     string
	stream grpc.ClientStream
	sendMu sync.Mutex // grpc.ClientStream.SendMsg is not safe for concurrent use

	ctx    context.Context // the connection's lifetime; canceled by fail
	cancel context.CancelFunc
	wg     sync.WaitGroup

	done     chan struct{}
	failOnce sync.Once
	errMu    sync.Mutex
	err      error

	reqSeq      atomic.Uint64
	unknownLogs atomic.Int32 // log lines about unknown pushes, bounded by maxUnknownLogs
	badPushLogs atomic.Int32 // log lines about unreadable pushes, bounded likewise
}

// Dial connects as the official clients do (nacos-sdk-go common/remote/rpc/grpc_client.go
// connectToServer, Java GrpcClient.connectToServer): a unary ServerCheckRequest that answers the
// connection ID, then the bi-stream with a ConnectionSetupRequest on it, then a health check
// that proves the server holds the connection. The returned Conn is usable; ctx bounds Dial
// only.
func Dial(ctx context.Context, cfg DialConfig) (*Conn, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = defaultMaxMessageBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Limits = cfg.Limits.orDefaults()
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	// passthrough: the address is dialled as given, resolved by the dialer, as the Go client
	// does for IPs; one address, one connection, so the connection ID stays this one's.
	cc, err := grpc.NewClient("passthrough:///"+cfg.Address,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.MaxMessageBytes), grpc.ForceCodec(payloadCodec{tap: cfg.tap})),
		// The Go client's keepalive (grpc_client.go getKeepAliveTimeMillis).
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 60 * time.Second, Timeout: 20 * time.Second, PermitWithoutStream: true}),
	)
	if err != nil {
		return nil, fmt.Errorf("nacos: grpc client for %s: %w", cfg.Address, err)
	}
	lifetime, cancel := context.WithCancel(context.Background())
	c := &Conn{
		cfg: cfg, log: cfg.Logger.With("server", cfg.Address), cc: cc,
		ctx: lifetime, cancel: cancel, done: make(chan struct{}),
	}
	if err := c.setup(ctx); err != nil {
		c.fail(err)
		_ = c.Close()
		return nil, err
	}
	c.log = c.log.With("connectionId", c.id)
	c.wg.Add(1)
	go c.healthLoop()
	return c, nil
}

func (c *Conn) setup(ctx context.Context) error {
	err := c.call(ctx, typeServerCheckRequest, baseRequest{RequestID: c.nextID()}, Ref{}, false, func(body []byte) error {
		var err error
		c.id, err = decodeServerCheckResponse(body, c.cfg.Limits)
		return err
	})
	if err != nil {
		return fmt.Errorf("nacos: server check: %w", err)
	}

	stream, err := c.cc.NewStream(c.ctx, &biStreamDesc, methodBiStream)
	if err != nil {
		return fmt.Errorf("nacos: opening the bi-stream: %w", transportErr(err))
	}
	c.stream = stream
	c.wg.Add(1)
	go c.readLoop()

	setup := connectionSetupRequest{
		ClientVersion: c.cfg.ClientVersion,
		Labels:        map[string]string{"source": "sdk", "module": "naming"},
		Module:        "internal",
	}
	setupAt := time.Now()
	if err := c.send(typeConnectionSetupRequest, setup, nil); err != nil {
		return fmt.Errorf("nacos: sending ConnectionSetupRequest: %w", err)
	}

	// Nacos answers nothing to the setup; it answers 301 to requests until it has processed it
	// (GrpcRequestAcceptor.request), so a health check that passes proves registration. Polaris
	// never answers 301 (v2/access.go Request); there, the stream is registered when the
	// server's stream handler starts (RequestBiStream: SetStreamRef before the first Recv), which
	// the settle time covers.
	for {
		err := c.healthCheck(ctx)
		var se *ServerError
		if err == nil {
			break
		}
		if !errors.As(err, &se) || se.Code != errorUnregistered {
			return fmt.Errorf("nacos: health check after setup: %w", err)
		}
		if err := sleepCtx(ctx, c.ctx, setupRetry); err != nil {
			return fmt.Errorf("nacos: waiting for the server to register the connection: %w", err)
		}
	}
	if err := sleepCtx(ctx, c.ctx, setupSettle-time.Since(setupAt)); err != nil {
		return fmt.Errorf("nacos: waiting for the server to register the connection: %w", err)
	}
	return nil
}

// sleepCtx waits d unless either context ends first.
func sleepCtx(a, b context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-a.Done():
		return a.Err()
	case <-b.Done():
		return ErrClosed
	}
}

// ID is the connection ID the server gave this connection.
func (c *Conn) ID() string { return c.id }

// Done is closed when the connection is lost or closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why Done is closed; nil before.
func (c *Conn) Err() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// Close closes the connection and waits for its goroutines. It is idempotent.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	c.wg.Wait()
	return nil
}

// fail ends the connection with err (the first cause wins).
func (c *Conn) fail(err error) {
	c.failOnce.Do(func() {
		c.errMu.Lock()
		c.err = err
		c.errMu.Unlock()
		c.cancel()
		_ = c.cc.Close()
		close(c.done)
	})
}

// Subscribe subscribes to ref's pushes and answers its current state.
func (c *Conn) Subscribe(ctx context.Context, ref Ref) (*ServiceInfo, error) {
	var info *ServiceInfo
	err := c.call(ctx, typeSubscribeServiceRequest, c.subscribeRequest(ref, true), ref, true, func(body []byte) error {
		var err error
		info, err = decodeSubscribeResponse(body, c.cfg.Limits)
		return err
	})
	if err != nil {
		return nil, err
	}
	return info, nil
}

// Unsubscribe ends ref's pushes.
func (c *Conn) Unsubscribe(ctx context.Context, ref Ref) error {
	return c.call(ctx, typeSubscribeServiceRequest, c.subscribeRequest(ref, false), ref, true, func(body []byte) error {
		return decodeResponse(body, typeSubscribeServiceResponse, c.cfg.Limits, nil)
	})
}

func (c *Conn) subscribeRequest(ref Ref, subscribe bool) subscribeServiceRequest {
	return subscribeServiceRequest{namingRequest: c.namingRequest(ref), Subscribe: subscribe}
}

func (c *Conn) namingRequest(ref Ref) namingRequest {
	ns, group := ref.Namespace, ref.Group
	if ns == "" {
		ns = defaultNamespaceID
	}
	if group == "" {
		group = defaultGroup
	}
	return namingRequest{
		baseRequest: baseRequest{RequestID: c.nextID()},
		Namespace:   ns, ServiceName: ref.Service, GroupName: group, Module: "naming",
	}
}

// ListServices answers one page (pageNo from 1) of the services of (namespace, group).
func (c *Conn) ListServices(ctx context.Context, namespace, group string, pageNo, pageSize int) (ServicePage, error) {
	ref := Ref{Namespace: namespace, Group: group}
	req := serviceListRequest{namingRequest: c.namingRequest(ref), PageNo: pageNo, PageSize: pageSize}
	var page ServicePage
	err := c.call(ctx, typeServiceListRequest, req, Ref{Namespace: namespace, Group: req.GroupName}, true, func(body []byte) error {
		var err error
		page, err = decodeServiceListResponse(body, c.cfg.Limits)
		return err
	})
	return page, err
}

func (c *Conn) healthCheck(ctx context.Context) error {
	return c.call(ctx, typeHealthCheckRequest, baseRequest{RequestID: c.nextID()}, Ref{}, false, func(body []byte) error {
		return decodeResponse(body, typeHealthCheckResponse, c.cfg.Limits, nil)
	})
}

func (c *Conn) healthLoop() {
	defer c.wg.Done()
	every := healthCheckInterval
	if c.cfg.healthEvery > 0 {
		every = c.cfg.healthEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		var err error
		for range healthCheckAttempts {
			if err = c.healthCheck(c.ctx); err == nil || c.ctx.Err() != nil {
				break
			}
		}
		if err != nil && c.ctx.Err() == nil {
			c.fail(fmt.Errorf("nacos: %d health checks failed: %w", healthCheckAttempts, err))
			return
		}
	}
}

func (c *Conn) nextID() string {
	return strconv.FormatUint(c.reqSeq.Add(1), 10)
}

// headers are the auth headers of a request about ref.
func (c *Conn) headers(ctx context.Context, ref Ref, naming bool) (map[string]string, error) {
	h := map[string]string{}
	if c.cfg.Tokens != nil {
		tok, err := c.cfg.Tokens.Token(ctx)
		if err != nil {
			return nil, fmt.Errorf("nacos: access token: %w", err)
		}
		h["accessToken"] = tok
	}
	if naming && c.cfg.AccessKey != "" {
		for k, v := range SignHeaders(c.cfg.AccessKey, c.cfg.SecretKey, ref, time.Now()) {
			h[k] = v
		}
	}
	return h, nil
}

// call sends one unary request, bounded by cfg.Timeout, and decodes the response's JSON body
// with decode. A response of type ErrorResponse is a *ServerError; other failed responses say
// so in their JSON, which decode reads (decodeResponse).
func (c *Conn) call(ctx context.Context, typ string, req any, ref Ref, naming bool, decode func(body []byte) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel) // Close ends calls in flight
	defer stop()
	headers, err := c.headers(ctx, ref, naming)
	if err != nil {
		return err
	}
	body, err := c.invoke(ctx, typ, req, headers)
	if err == nil {
		err = decode(body)
	}
	var se *ServerError
	if errors.As(err, &se) && se.Code == errorNoRight && c.cfg.Tokens != nil {
		// The server refused the token before its time (its secret changed, or it restarted
		// with another): the next request logs in again.
		c.cfg.Tokens.Invalidate(headers["accessToken"])
	}
	return err
}

// invoke sends one unary request and answers its response's body.
func (c *Conn) invoke(ctx context.Context, typ string, req any, headers map[string]string) ([]byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("nacos: encoding %s: %w", typ, err)
	}
	in := &Payload{Type: typ, Headers: headers, Body: body}
	var out Payload
	if err := c.cc.Invoke(ctx, methodRequest, in, &out); err != nil {
		if c.ctx.Err() != nil {
			return nil, fmt.Errorf("nacos: %s: %w", typ, ErrClosed)
		}
		return nil, fmt.Errorf("nacos: %s: %w", typ, transportErr(err))
	}
	if out.Type == typeErrorResponse {
		if err := decodeResponse(out.Body, typeErrorResponse, c.cfg.Limits, nil); err != nil {
			return nil, err
		}
		return nil, NewServerError(errorServer, "ErrorResponse with resultCode 200")
	}
	return out.Body, nil
}

// transportErr keeps a gRPC status of an answered call apart from a lost connection: a status
// the server's handler returned (Polaris answers an unknown request type with codes.Unknown,
// v2/access.go UnmarshalPayload) is a *ServerError; the rest is the connection's.
func transportErr(err error) error {
	s, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch s.Code() {
	case codes.ResourceExhausted:
		// Raised on this side when an answer exceeds MaxMessageBytes (MaxCallRecvMsgSize).
		return decodeErr("response", err, "larger than the message size limit: %s", s.Message())
	case codes.Unknown, codes.InvalidArgument, codes.Unimplemented, codes.PermissionDenied,
		codes.Unauthenticated, codes.FailedPrecondition:
		return NewServerError(errorServer, "grpc "+s.Code().String()+": "+s.Message())
	}
	return err
}

// send writes one payload on the bi-stream.
func (c *Conn) send(typ string, body any, headers map[string]string) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("nacos: encoding %s: %w", typ, err)
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if err := c.stream.SendMsg(&Payload{Type: typ, Headers: headers, Body: b}); err != nil {
		return fmt.Errorf("nacos: sending %s: %w", typ, transportErr(err))
	}
	return nil
}

// readLoop answers what the server sends on the bi-stream until the stream ends.
func (c *Conn) readLoop() {
	defer c.wg.Done()
	for {
		var p Payload
		if err := c.stream.RecvMsg(&p); err != nil {
			if c.ctx.Err() == nil {
				c.fail(fmt.Errorf("nacos: bi-stream ended: %w", err))
			}
			return
		}
		if err := c.handlePush(&p); err != nil {
			c.fail(err)
			return
		}
	}
}

// handlePush answers one request of the server. Only a failure to write the answer, or the
// server's ConnectResetRequest, ends the connection.
func (c *Conn) handlePush(p *Payload) error {
	ok := response{ResultCode: resultSuccess, Success: true}
	switch p.Type {
	case typeNotifySubscriberRequest:
		id, ref, info, err := decodeNotifySubscriber(p.Body, c.cfg.Limits)
		ok.RequestID = id
		if err != nil {
			h, _ := decodePushHeader(p.Body, p.Type, c.cfg.Limits) // the ID, if it can be read
			// Answered with a failed NotifySubscriberResponse, not an ErrorResponse: Polaris
			// closes the stream on a response type it does not know (v2/access.go
			// RequestBiStream, UnmarshalPayload).
			if c.badPushLogs.Add(1) <= maxUnknownLogs {
				c.log.Warn("nacos: cannot read a push; answered with a failure", "error", err)
			}
			ok = response{ResultCode: resultFail, ErrorCode: errorClientInvalid, Message: "push not understood", RequestID: h.RequestID}
			return c.send(typeNotifySubscriberResponse, ok, nil)
		}
		if err := c.send(typeNotifySubscriberResponse, ok, nil); err != nil {
			return err
		}
		if c.cfg.OnPush != nil {
			c.cfg.OnPush(ref, info)
		}
		return nil
	case typeClientDetectionRequest:
		h, _ := decodePushHeader(p.Body, p.Type, c.cfg.Limits)
		ok.RequestID = h.RequestID
		return c.send(typeClientDetectionResponse, ok, nil)
	case typeConnectResetRequest:
		h, _ := decodePushHeader(p.Body, p.Type, c.cfg.Limits)
		ok.RequestID = h.RequestID
		_ = c.send(typeConnectResetResponse, ok, nil)
		return ErrConnectionReset
	}
	h, _ := decodePushHeader(p.Body, "request", c.cfg.Limits)
	if c.unknownLogs.Add(1) <= maxUnknownLogs {
		c.log.Warn("nacos: the server sent a request of a type this client does not handle; answered with an error",
			"type", Clip(p.Type, 64))
	}
	return c.send(typeErrorResponse, response{
		ResultCode: resultFail, ErrorCode: errorClientInvalid,
		Message: "request type not supported by this client", RequestID: h.RequestID,
	}, nil)
}

package wire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of HTTPConfig.
const (
	DefaultContextPath = "/nacos"
	DefaultHTTPTimeout = 10 * time.Second
	// DefaultMaxBodyBytes bounds one answer of the HTTP API: room for a service at
	// DefaultLimits' MaxInstances with Dubbo-sized metadata, and for a listing page of
	// MaxServiceNames long names.
	DefaultMaxBodyBytes = 64 << 20
	// DefaultUserAgent is what the client calls itself. Alibaba's Nacos 1.x server enables the
	// UDP push only for the user agents of clients it knows (naming misc/ClientInfo: a
	// "Nacos-Go-Client:v<version>" agent is ClientType.GO; PushService.canEnablePush refuses
	// UNKNOWN), so Galleon names itself as the Go client whose protocol it speaks.
	DefaultUserAgent = "Nacos-Go-Client:v1.4.1"
)

// maxErrorBody is how much of an error answer's body is read for its message.
const maxErrorBody = 4 << 10

// HTTPConfig configures an HTTPClient of Nacos's 1.x OpenAPI.
type HTTPConfig struct {
	// BaseURL is the server, "http://host:8848" or https; the context path is added to it.
	BaseURL string
	// ContextPath is the server's context path (DefaultContextPath when empty; "/" for none).
	ContextPath string
	// TLS configures https (nil: the system's roots).
	TLS *tls.Config
	// Timeout bounds every request, its body read included (DefaultHTTPTimeout when zero).
	Timeout time.Duration
	// MaxBodyBytes bounds every answer's body (DefaultMaxBodyBytes when zero).
	MaxBodyBytes int64
	// Tokens, when set, gives the accessToken sent with every request (query parameter
	// accessToken, as Nacos's HTTP clients send it).
	Tokens *TokenSource
	// AccessKey and SecretKey sign naming requests (SignHeaders); "": no signing.
	AccessKey, SecretKey string
	// ClientIP is sent as clientIP with a udpPort: the address the server sends UDP pushes to
	// (Nacos's clients send their own address). Empty: not sent.
	ClientIP string
	// UserAgent is sent as User-Agent (DefaultUserAgent when empty).
	UserAgent string
	// Limits bound what the decoders accept (DefaultLimits for zero fields).
	Limits Limits
}

// HTTPClient speaks Nacos's 1.x naming OpenAPI (/v1/ns/...) to one server. It is safe for
// concurrent use. Errors say whether the server answered (*ServerError, *DecodeError) or could
// not be reached (anything else); none carries the URL's query (tokens, signatures).
type HTTPClient struct {
	cfg  HTTPConfig
	base string // BaseURL + context path, no trailing slash
	hc   *http.Client
}

// NewHTTPClient returns a client for cfg.
func NewHTTPClient(cfg HTTPConfig) *HTTPClient {
	if cfg.ContextPath == "" {
		cfg.ContextPath = DefaultContextPath
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultHTTPTimeout
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	cfg.Limits = cfg.Limits.orDefaults()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg.TLS
	tr.Proxy = nil
	base := strings.TrimRight(cfg.BaseURL, "/")
	if p := strings.Trim(cfg.ContextPath, "/"); p != "" {
		base += "/" + p
	}
	return &HTTPClient{
		cfg:  cfg,
		base: base,
		hc: &http.Client{
			Transport: tr,
			// A redirect would take the query (accessToken, signature) to wherever the
			// server points; Nacos does not redirect its API.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// Close releases the client's idle connections.
func (c *HTTPClient) Close() { c.hc.CloseIdleConnections() }

// Instances returns the state of ref (GET /v1/ns/instance/list, healthyOnly=false: every
// enabled instance, healthy or not). udpPort > 0 registers the caller for the UDP push of ref's
// changes to ClientIP:udpPort (see ListenPush); 0 does not.
//
// serviceName is sent grouped ("group@@service") with groupName beside it, as Nacos's 1.x
// clients send it: Polaris reads the group from serviceName only.
func (c *HTTPClient) Instances(ctx context.Context, ref Ref, udpPort int) (*ServiceInfo, error) {
	if ref.Group == "" {
		ref.Group = defaultGroup
	}
	q := url.Values{}
	q.Set("serviceName", groupedName(ref))
	q.Set("groupName", ref.Group)
	if ref.Namespace != "" {
		q.Set("namespaceId", ref.Namespace)
	}
	q.Set("clusters", "")
	q.Set("healthyOnly", "false")
	if udpPort > 0 {
		q.Set("udpPort", strconv.Itoa(udpPort))
		if c.cfg.ClientIP != "" {
			q.Set("clientIP", c.cfg.ClientIP)
		}
	}
	body, err := c.get(ctx, "/v1/ns/instance/list", q, &ref, "ServiceInfo")
	if err != nil {
		return nil, err
	}
	return DecodeServiceInfo(body, c.cfg.Limits)
}

// ListServices returns page pageNo (from 1) of the services of (namespace, group)
// (GET /v1/ns/service/list).
func (c *HTTPClient) ListServices(ctx context.Context, namespace, group string, pageNo, pageSize int) (ServicePage, error) {
	if group == "" {
		group = defaultGroup
	}
	q := url.Values{}
	q.Set("pageNo", strconv.Itoa(pageNo))
	q.Set("pageSize", strconv.Itoa(pageSize))
	q.Set("groupName", group)
	if namespace != "" {
		q.Set("namespaceId", namespace)
	}
	body, err := c.get(ctx, "/v1/ns/service/list", q, &Ref{}, "ServiceList")
	if err != nil {
		return ServicePage{}, err
	}
	return decodeServiceList(body, c.cfg.Limits)
}

// Namespaces returns the IDs of the server's namespaces (GET /v1/console/namespaces), the
// default namespace as "" (Nacos 1 and 2 list it with the ID "", Nacos 3 with "public").
// Polaris does not serve this path: it answers 404 (a *ServerError).
func (c *HTTPClient) Namespaces(ctx context.Context) ([]string, error) {
	body, err := c.get(ctx, "/v1/console/namespaces", url.Values{}, nil, "NamespaceList")
	if err != nil {
		return nil, err
	}
	return decodeNamespaces(body, c.cfg.Limits)
}

// get sends GET path?q with the credentials and returns the body of a 2xx answer. sign is the
// resource of the AK/SK signature (nil: not signed, not a naming request).
func (c *HTTPClient) get(ctx context.Context, path string, q url.Values, sign *Ref, what string) ([]byte, error) {
	token := ""
	if c.cfg.Tokens != nil {
		tok, err := c.cfg.Tokens.Token(ctx)
		if err != nil {
			return nil, fmt.Errorf("nacos: login for GET %s: %w", path, err)
		}
		token = tok
		if token != "" {
			q.Set("accessToken", token)
		}
	}
	if sign != nil {
		for k, v := range SignHeaders(c.cfg.AccessKey, c.cfg.SecretKey, *sign, time.Now()) {
			q.Set(k, v)
		}
	}
	body, status, err := c.do(ctx, http.MethodGet, c.base+path, q, nil, what)
	if err != nil {
		return nil, err
	}
	if status == http.StatusForbidden && token != "" {
		// The server no longer takes this token (it expired early, or the server's secret
		// changed): the next request logs in again.
		c.cfg.Tokens.Invalidate(token)
	}
	if status < 200 || status > 299 {
		return nil, NewServerError(status, redact(string(body), token, q.Get("signature")))
	}
	return body, nil
}

// do sends one request bounded by the client's timeout and reads its answer: a 2xx body up to
// MaxBodyBytes (beyond: a *DecodeError), another body's first maxErrorBody bytes. The query and
// form go on the wire only, never into an error.
func (c *HTTPClient) do(ctx context.Context, method, rawURL string, q url.Values, form url.Values, what string) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	if err != nil {
		return nil, 0, fmt.Errorf("nacos: %s %s: %w", method, pathOf(rawURL), stripURL(err))
	}
	req.URL.RawQuery = q.Encode()
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	req.Header.Set("Client-Version", c.cfg.UserAgent)
	// No Accept header: Nacos's clients send none, and Polaris's login route, which declares
	// no representation, answers 406 to "Accept: application/json".
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded;charset=utf-8")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("nacos: %s %s: %w", method, pathOf(rawURL), stripURL(err))
	}
	defer resp.Body.Close()
	limit := c.cfg.MaxBodyBytes
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		limit = maxErrorBody
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, 0, fmt.Errorf("nacos: %s %s: reading the answer: %w", method, pathOf(rawURL), stripURL(err))
	}
	if int64(len(data)) > limit {
		if limit == maxErrorBody {
			data = data[:limit]
		} else {
			return nil, 0, decodeErr(what, nil, "answer longer than %d bytes", limit)
		}
	}
	return data, resp.StatusCode, nil
}

// stripURL returns the error inside a *url.Error: its message repeats the URL, query and all.
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("timed out: %w", ue.Err)
		}
		return ue.Err
	}
	return err
}

// pathOf is rawURL's path, for errors.
func pathOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(bad URL)"
	}
	return u.Path
}

// redact replaces every secret in msg (a server's answer, which may echo the request) by "***".
func redact(msg string, secrets ...string) string {
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "***")
		}
	}
	return msg
}

// IsNotFound reports whether err is a *ServerError for HTTP 404: a path the server does not
// serve (Polaris: /v1/console/namespaces).
func IsNotFound(err error) bool {
	var se *ServerError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

// decodeServiceList decodes {"count": n, "doms": [names]} (Nacos ServiceController#list).
func decodeServiceList(body []byte, lim Limits) (ServicePage, error) {
	var page ServicePage
	d := newJSONDecoder(body, "ServiceList", lim)
	haveCount := false
	err := d.object(func(key string) error {
		switch key {
		case "count":
			haveCount = true
			return d.scalar("count", &page.Count)
		case "doms":
			page.Names = page.Names[:0]
			return d.array("service names", d.lim.MaxServiceNames, func() error {
				name, err := d.str("service name", d.lim.MaxStringBytes)
				// No service has an empty name; Polaris pads a group's page past its end
				// with "" (model/service.go HandleServiceListRequest slices within capacity).
				if err == nil && name != "" {
					page.Names = append(page.Names, name)
				}
				return err
			})
		}
		return d.skip()
	})
	if err == nil {
		err = d.end()
	}
	if err != nil {
		return ServicePage{}, err
	}
	if !haveCount {
		return ServicePage{}, decodeErr("ServiceList", nil, "no count")
	}
	if page.Count < 0 {
		return ServicePage{}, decodeErr("ServiceList", nil, "negative count %d", page.Count)
	}
	return page, nil
}

// decodeNamespaces decodes Nacos's console namespace list {"code": 200, "data": [{"namespace":
// id, ...}]} (NamespaceController#getNamespaces) into the IDs, the default namespace's as "".
func decodeNamespaces(body []byte, lim Limits) ([]string, error) {
	const what = "NamespaceList"
	d := newJSONDecoder(body, what, lim)
	code := 0
	haveData := false
	var ids []string
	err := d.object(func(key string) error {
		switch key {
		case "code":
			return d.scalar("code", &code)
		case "data":
			haveData = true
			return d.array("namespaces", d.lim.MaxServiceNames, func() error {
				id, err := decodeNamespaceID(d)
				if err != nil {
					return err
				}
				ids = append(ids, id)
				return nil
			})
		}
		return d.skip()
	})
	if err == nil {
		err = d.end()
	}
	if err != nil {
		return nil, err
	}
	if code != 0 && code != http.StatusOK {
		return nil, NewServerError(code, "namespace listing refused")
	}
	if !haveData {
		return nil, decodeErr(what, nil, "no data")
	}
	return ids, nil
}

// decodeNamespaceID reads one element of a namespace listing's data: its "namespace" (the ID),
// "" for the default namespace.
func decodeNamespaceID(d *jsonDecoder) (string, error) {
	id, seen := "", false
	err := d.object(func(key string) error {
		if key != "namespace" {
			return d.skip()
		}
		seen = true
		var err error
		id, err = d.str("namespace", d.lim.MaxStringBytes)
		return err
	})
	if err != nil {
		return "", err
	}
	if !seen {
		return "", d.fail(nil, "a namespace without its ID")
	}
	if id == defaultNamespaceID {
		id = ""
	}
	return id, nil
}

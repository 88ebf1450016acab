package nacostest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The Nacos names of the defaults.
const (
	DefaultNamespace = "public"
	DefaultGroup     = "DEFAULT_GROUP"
	DefaultCluster   = "DEFAULT"
)

// RequestTimeout bounds each request of a Client whose context has no earlier deadline.
const RequestTimeout = 10 * time.Second

// maxBody bounds what a Client reads of an answer.
const maxBody = 8 << 20

// Ref names a Nacos service: "" Namespace is Nacos's "public", "" Group DEFAULT_GROUP.
type Ref struct{ Namespace, Group, Service string }

func (r Ref) namespace() string {
	if r.Namespace == "" {
		return DefaultNamespace
	}
	return r.Namespace
}

func (r Ref) group() string {
	if r.Group == "" {
		return DefaultGroup
	}
	return r.Group
}

// Grouped is the service's name as Nacos 1.x clients send it, "GROUP@@service".
func (r Ref) Grouped() string { return r.group() + "@@" + r.Service }

// ServiceOptions are the service-level settings CreateService writes.
type ServiceOptions struct {
	// ProtectThreshold is Nacos's protect threshold (0 to 1): when the share of healthy
	// instances is below it, the server serves every instance as healthy.
	ProtectThreshold float64
	Metadata         map[string]string
}

// Instance is one instance as Client writes it. Mind the zero values: an Instance{IP, Port} is
// unhealthy, disabled and of weight 0; NewInstance gives Nacos's defaults.
type Instance struct {
	IP      string
	Port    int
	Weight  float64
	Healthy bool
	Enabled bool
	// Ephemeral is sent as Nacos's ephemeral flag. Polaris ignores it: every instance written
	// over HTTP v1 is health-checked by heartbeat (Client.Beat, KeepAlive) and read back as
	// ephemeral.
	Ephemeral bool
	Cluster   string // "" is DEFAULT
	Metadata  map[string]string
}

// NewInstance is an instance with Nacos's defaults: healthy, enabled, weight 1, persistent.
func NewInstance(ip string, port int) Instance {
	return Instance{IP: ip, Port: port, Weight: 1, Healthy: true, Enabled: true}
}

func (in Instance) cluster() string {
	if in.Cluster == "" {
		return DefaultCluster
	}
	return in.Cluster
}

// ServiceInfo is the answer of GET /nacos/v1/ns/instance/list, as far as tests read it.
type ServiceInfo struct {
	Name                     string          `json:"name"` // "GROUP@@service"
	GroupName                string          `json:"groupName"`
	Clusters                 string          `json:"clusters"`
	Hosts                    []InstanceInfo  `json:"hosts"`
	Checksum                 string          `json:"checksum"`
	CacheMillis              int64           `json:"cacheMillis"`
	LastRefTime              int64           `json:"lastRefTime"`
	ReachProtectionThreshold bool            `json:"reachProtectionThreshold"`
	Raw                      json.RawMessage `json:"-"`
}

// InstanceInfo is one host of a ServiceInfo.
type InstanceInfo struct {
	InstanceID  string            `json:"instanceId"`
	IP          string            `json:"ip"`
	Port        int               `json:"port"`
	Weight      float64           `json:"weight"`
	Healthy     bool              `json:"healthy"`
	Enabled     bool              `json:"enabled"`
	Ephemeral   bool              `json:"ephemeral"`
	ClusterName string            `json:"clusterName"`
	ServiceName string            `json:"serviceName"`
	Metadata    map[string]string `json:"metadata"`
}

// Find returns the host at ip:port, or nil.
func (si *ServiceInfo) Find(ip string, port int) *InstanceInfo {
	for i := range si.Hosts {
		if si.Hosts[i].IP == ip && si.Hosts[i].Port == port {
			return &si.Hosts[i]
		}
	}
	return nil
}

// StatusError is an answer other than 2xx.
type StatusError struct {
	Method, Path string
	Status       int
	Body         string // the start of it

	full []byte
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("nacostest: %s %s answered %d: %s", e.Method, e.Path, e.Status, e.Body)
}

// Client writes to a Nacos server over its HTTP v1 OpenAPI, as a Nacos user's scripts and the
// Nacos 1.x clients do (form-encoded requests; the service named "GROUP@@service", which is
// what Polaris reads: it ignores groupName). Polaris's Nacos API has no service or namespace
// management: with a Polaris base URL, CreateNamespace, CreateService and DeleteService go to
// Polaris's own API instead (the service named as Polaris's Nacos API names it, "GROUP__service"
// outside DEFAULT_GROUP, the protect threshold in its metadata). It is safe for concurrent use.
type Client struct {
	// Username and Password, if set, log in to the Nacos API (POST {ContextPath}/v1/auth/login,
	// then Polaris's /v1/auth/login) and send the token as accessToken.
	Username, Password string
	// PolarisToken is the X-Polaris-Token of requests to Polaris's own API.
	PolarisToken string
	// ViaPolaris sends the instance writes to Polaris's own API too: Polaris 1.18.1's Nacos
	// HTTP API cannot authenticate a write (apiserver/nacosserver/v1/http/utils.go,
	// ParseHeaderContext, drops the token), so with client auth on this is the only way in.
	ViaPolaris bool
	// ContextPath is Nacos's, "/nacos" when empty.
	ContextPath string

	base, polaris string
	hc            *http.Client

	mu    sync.Mutex
	token string
	until time.Time
}

// NewClient returns a client of the Nacos HTTP API at base ("http://host:port") and, if not
// empty, Polaris's own HTTP API at polaris. hc nil is a loopback client (no proxy).
func NewClient(base, polaris string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}}
	}
	return &Client{base: strings.TrimSuffix(base, "/"), polaris: strings.TrimSuffix(polaris, "/"), hc: hc}
}

func (c *Client) contextPath() string {
	if c.ContextPath == "" {
		return "/nacos"
	}
	return c.ContextPath
}

// Response is a raw answer.
type Response struct {
	Status int
	Body   []byte
}

// Do sends one form-encoded request to the Nacos API: path is under the context path
// ("/v1/ns/instance"); form goes in the body for POST, PUT and DELETE, in the query for GET.
// The access token is added when the client logs in. An answer other than 2xx is a
// *StatusError.
func (c *Client) Do(ctx context.Context, method, path string, form url.Values) (*Response, error) {
	form = cloneValues(form)
	if c.Username != "" || c.Password != "" {
		tok, err := c.accessToken(ctx)
		if err != nil {
			return nil, err
		}
		form.Set("accessToken", tok)
	}
	return c.send(ctx, method, c.base+c.contextPath()+path, form, nil)
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// send sends one request: a form (in the query for GET, else the body) or a JSON body.
func (c *Client) send(ctx context.Context, method, u string, form url.Values, jsonBody any) (*Response, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, RequestTimeout)
		defer cancel()
	}
	var body io.Reader
	ctype := ""
	switch {
	case jsonBody != nil:
		b, err := json.Marshal(jsonBody)
		if err != nil {
			return nil, err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	case method == http.MethodGet || method == http.MethodDelete:
		// Go's servers (Polaris's) read no form from the body of a DELETE; Nacos's clients
		// send their parameters in the query anyway.
		if len(form) > 0 {
			u += "?" + form.Encode()
		}
	default:
		body, ctype = strings.NewReader(form.Encode()), "application/x-www-form-urlencoded"
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if jsonBody != nil {
		// Only Polaris's own API gets an Accept: its Nacos login route declares no
		// representation, and answers 406 to one.
		req.Header.Set("Accept", "application/json")
	}
	if c.PolarisToken != "" && c.polaris != "" && strings.HasPrefix(u, c.polaris+"/") {
		req.Header.Set("X-Polaris-Token", c.PolarisToken)
	}
	path := req.URL.Path
	resp, err := c.hc.Do(req)
	if err != nil {
		// The URL of a GET holds the form, the token with it: name the path only.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("nacostest: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("nacostest: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, &StatusError{Method: method, Path: path, Status: resp.StatusCode, Body: fmt.Sprintf("%.300s", b), full: b}
	}
	return &Response{Status: resp.StatusCode, Body: b}, nil
}

// Login logs in with Username and Password and returns the access token and its lifetime. It
// posts them as Nacos's clients do, in the form body, to {ContextPath}/v1/auth/login, and on a
// 404 to Polaris's /v1/auth/login. Polaris reads the query only
// (apiserver/nacosserver/v1/auth.go, Login: ParseQueryParams), so when the answer has no token
// it posts them again in the query. (Polaris takes a Polaris token as the password and gives it
// back as the access token.)
func (c *Client) Login(ctx context.Context) (token string, ttl time.Duration, err error) {
	form := url.Values{"username": {c.Username}, "password": {c.Password}}
	u := ""
	var r *Response
	for _, p := range []string{c.contextPath() + "/v1/auth/login", "/v1/auth/login"} {
		u = c.base + p
		r, err = c.send(ctx, http.MethodPost, u, form, nil)
		var se *StatusError
		if err == nil || !errors.As(err, &se) || se.Status != http.StatusNotFound {
			break
		}
	}
	if err != nil {
		return "", 0, err
	}
	token, ttl, err = loginAnswer(r.Body)
	if err == nil && token == "" {
		// The URL (the password in it) is kept out of errors by send.
		if r, err = c.send(ctx, http.MethodPost, u+"?"+form.Encode(), nil, nil); err != nil {
			return "", 0, err
		}
		token, ttl, err = loginAnswer(r.Body)
	}
	if err == nil && token == "" {
		err = errors.New("nacostest: login answered no accessToken")
	}
	return token, ttl, err
}

func loginAnswer(body []byte) (string, time.Duration, error) {
	var ans struct {
		AccessToken string `json:"accessToken"`
		TokenTTL    int64  `json:"tokenTtl"` // seconds
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return "", 0, fmt.Errorf("nacostest: login answer (%d bytes): %w", len(body), err)
	}
	return ans.AccessToken, time.Duration(ans.TokenTTL) * time.Second, nil
}

// accessToken is the cached token, renewed at 90 % of its lifetime.
func (c *Client) accessToken(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token != "" && time.Now().Before(c.until) {
		return c.token, nil
	}
	tok, ttl, err := c.Login(ctx)
	if err != nil {
		return "", err
	}
	c.token, c.until = tok, time.Now().Add(ttl-ttl/10)
	return tok, nil
}

// instanceForm is the form of a Nacos 1.x client's registration.
func instanceForm(ref Ref, in Instance) (url.Values, error) {
	md := in.Metadata
	if md == nil {
		md = map[string]string{} // Polaris refuses a registration without metadata
	}
	mdJSON, err := json.Marshal(md)
	if err != nil {
		return nil, err
	}
	return url.Values{
		"namespaceId": {ref.namespace()},
		"groupName":   {ref.group()},
		"serviceName": {ref.Grouped()},
		"clusterName": {in.cluster()},
		"ip":          {in.IP},
		"port":        {strconv.Itoa(in.Port)},
		"weight":      {strconv.FormatFloat(in.Weight, 'f', -1, 64)},
		"healthy":     {strconv.FormatBool(in.Healthy)},
		"enabled":     {strconv.FormatBool(in.Enabled)},
		"ephemeral":   {strconv.FormatBool(in.Ephemeral)},
		"metadata":    {string(mdJSON)},
	}, nil
}

// RegisterInstance registers (or re-registers) an instance: POST /v1/ns/instance (or, with
// ViaPolaris, Polaris's POST /naming/v1/instances).
func (c *Client) RegisterInstance(ctx context.Context, ref Ref, in Instance) error {
	if c.ViaPolaris {
		return c.polarisInstances(ctx, http.MethodPost, "/naming/v1/instances", ref, in)
	}
	form, err := instanceForm(ref, in)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodPost, "/v1/ns/instance", form)
	return err
}

// UpdateInstance changes a registered instance: PUT /v1/ns/instance (or Polaris's PUT
// /naming/v1/instances).
func (c *Client) UpdateInstance(ctx context.Context, ref Ref, in Instance) error {
	if c.ViaPolaris {
		return c.polarisInstances(ctx, http.MethodPut, "/naming/v1/instances", ref, in)
	}
	form, err := instanceForm(ref, in)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodPut, "/v1/ns/instance", form)
	return err
}

// DeregisterInstance removes an instance (in.IP, in.Port, in.Cluster): DELETE /v1/ns/instance
// (or Polaris's POST /naming/v1/instances/delete).
func (c *Client) DeregisterInstance(ctx context.Context, ref Ref, in Instance) error {
	if c.ViaPolaris {
		return c.polarisInstances(ctx, http.MethodPost, "/naming/v1/instances/delete", ref, in)
	}
	form := url.Values{
		"namespaceId": {ref.namespace()}, "groupName": {ref.group()}, "serviceName": {ref.Grouped()},
		"clusterName": {in.cluster()}, "ip": {in.IP}, "port": {strconv.Itoa(in.Port)},
		"ephemeral": {strconv.FormatBool(in.Ephemeral)},
	}
	_, err := c.Do(ctx, http.MethodDelete, "/v1/ns/instance", form)
	return err
}

// Beat sends one heartbeat for an instance, as the Nacos 1.x client does: PUT
// /v1/ns/instance/beat with the beat as JSON. Polaris marks an instance written over HTTP v1
// unhealthy some 25 to 40 s after its last beat (its heartbeat TTL is 5 s), ephemeral or not;
// and it answers 10200 (found) even for an instance it does not have.
func (c *Client) Beat(ctx context.Context, ref Ref, in Instance) error {
	beat, err := json.Marshal(map[string]any{
		"serviceName": ref.Grouped(), "cluster": in.cluster(), "ip": in.IP, "port": in.Port,
		"weight": in.Weight, "ephemeral": in.Ephemeral, "metadata": in.Metadata,
	})
	if err != nil {
		return err
	}
	form := url.Values{
		"namespaceId": {ref.namespace()}, "serviceName": {ref.Grouped()}, "groupName": {ref.group()},
		"clusterName": {in.cluster()}, "ip": {in.IP}, "port": {strconv.Itoa(in.Port)},
		"beat": {string(beat)},
	}
	_, err = c.Do(ctx, http.MethodPut, "/v1/ns/instance/beat", form)
	return err
}

// Instances reads a service's instances, unhealthy ones included: GET /v1/ns/instance/list
// with healthyOnly=false. (Disabled instances are never listed, by Nacos or Polaris.)
func (c *Client) Instances(ctx context.Context, ref Ref) (*ServiceInfo, error) {
	r, err := c.Do(ctx, http.MethodGet, "/v1/ns/instance/list", url.Values{
		"namespaceId": {ref.namespace()}, "serviceName": {ref.Grouped()}, "groupName": {ref.group()},
		"healthyOnly": {"false"},
	})
	if err != nil {
		return nil, err
	}
	var si ServiceInfo
	if err := json.Unmarshal(r.Body, &si); err != nil {
		return nil, fmt.Errorf("nacostest: instance list: %w", err)
	}
	si.Raw = r.Body
	return &si, nil
}

// Services reads one page of a namespace's service names in a group: GET /v1/ns/service/list.
// count is what the server says it has (Polaris: every service of the namespace, whatever the
// group).
func (c *Client) Services(ctx context.Context, namespace, group string, pageNo, pageSize int) (count int, names []string, err error) {
	ref := Ref{Namespace: namespace, Group: group}
	r, err := c.Do(ctx, http.MethodGet, "/v1/ns/service/list", url.Values{
		"namespaceId": {ref.namespace()}, "groupName": {ref.group()},
		"pageNo": {strconv.Itoa(pageNo)}, "pageSize": {strconv.Itoa(pageSize)},
	})
	if err != nil {
		return 0, nil, err
	}
	var ans struct {
		Count int      `json:"count"`
		Doms  []string `json:"doms"`
	}
	if err := json.Unmarshal(r.Body, &ans); err != nil {
		return 0, nil, fmt.Errorf("nacostest: service list: %w", err)
	}
	return ans.Count, ans.Doms, nil
}

// WaitInstances polls Instances every 100 ms until cond holds, and returns that answer; on
// timeout (ctx) the error quotes the last answer.
func (c *Client) WaitInstances(ctx context.Context, ref Ref, cond func(*ServiceInfo) bool) (*ServiceInfo, error) {
	var last []byte
	var lastErr error
	for {
		si, err := c.Instances(ctx, ref)
		if err == nil && cond(si) {
			return si, nil
		}
		if err == nil {
			last = si.Raw
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return nil, fmt.Errorf("nacostest: %s never matched: %w (last answer %.2000s)", ref.Grouped(), ctx.Err(), last)
			}
			return nil, fmt.Errorf("nacostest: %s never matched: %w (last error %v)", ref.Grouped(), ctx.Err(), lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// polarisService is the name Polaris's Nacos API gives a Nacos service
// (apiserver/nacosserver/model/instance.go, BuildServiceName).
func polarisService(ref Ref) string {
	if ref.group() == DefaultGroup {
		return ref.Service
	}
	return ref.group() + "__" + ref.Service
}

// polarisNamespace is the Polaris namespace of a Nacos namespace (model/constant.go,
// ToPolarisNamespace, with the default defaultNamespace "default").
func polarisNamespace(ns string) string {
	if ns == "" || ns == DefaultNamespace {
		return "default"
	}
	return ns
}

// protectThresholdKey is the Polaris service metadata Polaris's Nacos API reads the protect
// threshold from (apiserver/nacosserver/core/storage.go, ToNacosService).
const protectThresholdKey = "internal-nacos-protectThreshold"

// CreateNamespace creates a namespace: Nacos's POST /v1/console/namespaces (customNamespaceId,
// namespaceName), or Polaris's POST /naming/v1/namespaces (name id, comment name). Polaris also
// creates a namespace when an instance is first registered in it.
func (c *Client) CreateNamespace(ctx context.Context, id, name string) error {
	if c.polaris == "" {
		_, err := c.Do(ctx, http.MethodPost, "/v1/console/namespaces", url.Values{
			"customNamespaceId": {id}, "namespaceName": {name}, "namespaceDesc": {name},
		})
		return err
	}
	return c.polarisBatch(ctx, http.MethodPost, "/naming/v1/namespaces", []map[string]any{{"name": id, "comment": name}})
}

// CreateService creates a service with its protect threshold and metadata: Nacos's POST
// /v1/ns/service, or Polaris's POST /naming/v1/services (the threshold in the metadata key
// Polaris's Nacos API reads). Polaris also creates a service when an instance is first
// registered in it (with no threshold).
func (c *Client) CreateService(ctx context.Context, ref Ref, opts ServiceOptions) error {
	if c.polaris == "" {
		md, err := json.Marshal(opts.Metadata)
		if err != nil {
			return err
		}
		_, err = c.Do(ctx, http.MethodPost, "/v1/ns/service", url.Values{
			"namespaceId": {ref.namespace()}, "groupName": {ref.group()}, "serviceName": {ref.Service},
			"protectThreshold": {strconv.FormatFloat(opts.ProtectThreshold, 'f', -1, 64)},
			"metadata":         {string(md)},
		})
		return err
	}
	md := map[string]string{}
	for k, v := range opts.Metadata {
		md[k] = v
	}
	if opts.ProtectThreshold != 0 {
		md[protectThresholdKey] = strconv.FormatFloat(opts.ProtectThreshold, 'f', -1, 64)
	}
	return c.polarisBatch(ctx, http.MethodPost, "/naming/v1/services", []map[string]any{{
		"name": polarisService(ref), "namespace": polarisNamespace(ref.Namespace), "metadata": md,
	}})
}

// DeleteService deletes a service: Nacos's DELETE /v1/ns/service, or Polaris's POST
// /naming/v1/services/delete (which refuses while it has instances).
func (c *Client) DeleteService(ctx context.Context, ref Ref) error {
	if c.polaris == "" {
		_, err := c.Do(ctx, http.MethodDelete, "/v1/ns/service", url.Values{
			"namespaceId": {ref.namespace()}, "groupName": {ref.group()}, "serviceName": {ref.Service},
		})
		return err
	}
	return c.polarisBatch(ctx, http.MethodPost, "/naming/v1/services/delete", []map[string]any{{
		"name": polarisService(ref), "namespace": polarisNamespace(ref.Namespace),
	}})
}

// TouchServices writes the services again through Polaris's own API (PUT /naming/v1/services,
// a new comment), which moves their modification time. Polaris's service cache reads what its
// store changed since a little before its last read (every second), so a service created
// while the store was slow to commit can be missed, neither listed nor its instances served,
// until it is written again; an instance registration does not write its service. Polaris
// only: it needs the client's Polaris address.
func (c *Client) TouchServices(ctx context.Context, refs []Ref, comment string) error {
	if c.polaris == "" {
		return errors.New("nacostest: TouchServices needs Polaris's own API (NewClient's polaris address)")
	}
	items := make([]map[string]any, 0, len(refs))
	for _, ref := range refs {
		items = append(items, map[string]any{"name": polarisService(ref), "namespace": polarisNamespace(ref.Namespace), "comment": comment})
	}
	return c.polarisBatch(ctx, http.MethodPut, "/naming/v1/services", items)
}

// polarisInstances writes one instance through Polaris's own API as Polaris's Nacos API would
// store it (apiserver/nacosserver/model/instance.go, PrepareSpecInstance): the Nacos cluster and
// service name in metadata, the weight an integer, enabled as not isolated. Unlike a Nacos
// registration it has no heartbeat check: it stays as written.
func (c *Client) polarisInstances(ctx context.Context, method, path string, ref Ref, in Instance) error {
	md := map[string]string{}
	for k, v := range in.Metadata {
		md[k] = v
	}
	md["internal-nacos-cluster"] = in.cluster()
	md["internal-nacos-service"] = ref.Grouped()
	return c.polarisBatch(ctx, method, path, []map[string]any{{
		"service": polarisService(ref), "namespace": polarisNamespace(ref.Namespace),
		"host": in.IP, "port": in.Port, "weight": int(in.Weight), "healthy": in.Healthy,
		"isolate": !in.Enabled, "metadata": md, "enable_health_check": false,
	}})
}

// polarisBatch sends one batch request to Polaris's own API and checks every item's code
// (200000 is success; 400201, existed resource, is too: a create is idempotent here).
func (c *Client) polarisBatch(ctx context.Context, method, path string, items []map[string]any) error {
	r, err := c.send(ctx, method, c.polaris+path, nil, items)
	var se *StatusError
	if err != nil && !(errors.As(err, &se) && se.Status == http.StatusBadRequest) {
		return err
	}
	var body []byte
	if r != nil {
		body = r.Body
	} else {
		body = se.full
	}
	var ans struct {
		Code      int    `json:"code"`
		Info      string `json:"info"`
		Responses []struct {
			Code int    `json:"code"`
			Info string `json:"info"`
		} `json:"responses"`
	}
	if jerr := json.Unmarshal(body, &ans); jerr != nil {
		if err != nil {
			return err
		}
		return fmt.Errorf("nacostest: %s %s: %w", method, path, jerr)
	}
	for _, it := range ans.Responses {
		if it.Code != 200000 && it.Code != 400201 {
			return fmt.Errorf("nacostest: %s %s: Polaris code %d: %s", method, path, it.Code, it.Info)
		}
	}
	if len(ans.Responses) == 0 && ans.Code != 200000 {
		return fmt.Errorf("nacostest: %s %s: Polaris code %d: %s", method, path, ans.Code, ans.Info)
	}
	return nil
}

// KeepAlive beats for the instances list returns every interval (Nacos's 5 s if 0) until ctx
// ends, on a goroutine of its own; the returned stop cancels it and waits for it.
func (c *Client) KeepAlive(ctx context.Context, interval time.Duration, list func() map[Ref][]Instance) (stop func()) {
	if interval == 0 {
		interval = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			for ref, ins := range list() {
				for _, in := range ins {
					_ = c.Beat(ctx, ref, in)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

package eurekatest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client is a plain client of a Eureka server's REST API, what an application's Eureka client
// does to it: register, renew, cancel, status overrides, and the listings. The harness, the load
// generator (bench/internal/loadgen) and the end-to-end tests all register through it, so the
// registration JSON is written once (Instance.JSON).
type Client struct {
	// Base is the server's base URL, e.g. http://127.0.0.1:8761/eureka (what a Netflix client
	// calls its serviceUrl), without a trailing '/'.
	Base string
	// HTTP sends the requests; nil means HTTPClient.
	HTTP *http.Client
}

// HTTPClient is the client the helpers use by default; no overall timeout: pass a context.
var HTTPClient = &http.Client{Transport: &http.Transport{
	Proxy:               nil,
	MaxIdleConnsPerHost: 16,
	IdleConnTimeout:     30 * time.Second,
	DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
}}

// NewClient returns a client of the server at base, sending with hc (nil: HTTPClient).
func NewClient(base string, hc *http.Client) *Client {
	return &Client{Base: strings.TrimRight(base, "/"), HTTP: hc}
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return HTTPClient
}

// Close closes the idle connections of the client's HTTP client.
func (c *Client) Close() { c.http().CloseIdleConnections() }

// maxAnswer bounds the body Do keeps; the rest is read and dropped, so the connection is reused.
const maxAnswer = 64 << 20

// Response is an answer of the Eureka API.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends one request to Base+path (path like "/apps" or "/apps/APP/ID/status?value=UP")
// with Accept: accept (none if ""). A body that starts with '<' is sent as application/xml,
// any other as application/json. Any status is returned, not an error.
func (c *Client) Do(ctx context.Context, method, path, accept string, body []byte) (*Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if body != nil {
		ct := "application/json"
		if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '<' {
			ct = "application/xml"
		}
		req.Header.Set("Content-Type", ct)
	}
	resp, err := c.http().Do(req)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // its text would repeat the URL
		}
		return nil, fmt.Errorf("eureka %s %s%s: %w", method, c.Base, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	if err != nil {
		return nil, fmt.Errorf("eureka %s %s: reading the answer: %w", method, path, err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// StatusError is an answer with an unexpected status.
type StatusError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("eureka %s %s: %d %s: %s", e.Method, e.Path, e.Status, http.StatusText(e.Status), strings.Join(strings.Fields(e.Body), " "))
}

// expect sends a request and returns the status, which is one of ok, or an error.
func (c *Client) expect(ctx context.Context, method, path string, body []byte, ok ...int) (int, error) {
	r, err := c.Do(ctx, method, path, "", body)
	if err != nil {
		return 0, err
	}
	for _, code := range ok {
		if r.Status == code {
			return code, nil
		}
	}
	return r.Status, &StatusError{Method: method, Path: path, Status: r.Status, Body: string(r.Body)}
}

// Instance is one instance to register, in Netflix's terms.
type Instance struct {
	App              string // application name; Eureka upper-cases it
	ID               string // instanceId
	HostName         string // default IPAddr
	IPAddr           string
	VIPAddress       string // default lower-case App
	SecureVIPAddress string
	Port             int // 0: no (non-secure) port
	SecurePort       int // 0: no secure port
	// SecurePortOff lists SecurePort with @enabled "false", as a Spring Cloud client sends its
	// default 443 it does not serve.
	SecurePortOff bool
	Status        string // default UP
	Metadata      map[string]string
	// LeaseDuration is leaseInfo.durationInSecs, default 1 h (Eureka's default is 90 s). It does
	// not keep an instance listed on its own: Polaris's heartbeat TTL is
	// min(ceil(durationInSecs/3), renewalIntervalInSecs), 30 s here, and an instance nobody
	// renews leaves /apps a few TTLs after it registered, whatever this is. A test that
	// runs longer must Renew its instances (adapters/eureka's TestPolarisRealServer does).
	LeaseDuration time.Duration
	// RenewalInterval is leaseInfo.renewalIntervalInSecs, default 30 s (Eureka's).
	RenewalInterval time.Duration
	// Extra holds more fields of the instance object, sent as given (homePageUrl, countryId,
	// ...: what makes a registration as long as a real client's).
	Extra map[string]any
}

// JSON is the registration body, Netflix's {"instance": {...}}.
func (in Instance) JSON() []byte {
	type port struct {
		Value   int    `json:"$"`
		Enabled string `json:"@enabled"`
	}
	body := map[string]any{}
	for k, v := range in.Extra {
		body[k] = v
	}
	lease, renewal := cmp.Or(in.LeaseDuration, time.Hour), cmp.Or(in.RenewalInterval, 30*time.Second)
	for k, v := range map[string]any{
		"instanceId": in.ID, "app": strings.ToUpper(in.App), "hostName": cmp.Or(in.HostName, in.IPAddr), "ipAddr": in.IPAddr,
		"vipAddress": cmp.Or(in.VIPAddress, strings.ToLower(in.App)), "secureVipAddress": in.SecureVIPAddress,
		"status":     cmp.Or(in.Status, "UP"),
		"port":       port{in.Port, strconv.FormatBool(in.Port != 0)},
		"securePort": port{in.SecurePort, strconv.FormatBool(in.SecurePort != 0 && !in.SecurePortOff)},
		"dataCenterInfo": map[string]string{
			"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn",
		},
		"leaseInfo": map[string]int{"renewalIntervalInSecs": int(renewal / time.Second), "durationInSecs": int(lease / time.Second)},
	} {
		body[k] = v
	}
	if len(in.Metadata) > 0 {
		body["metadata"] = in.Metadata
	}
	b, err := json.Marshal(map[string]any{"instance": body})
	if err != nil {
		panic(err) // strings, numbers and maps of them (Extra's are the caller's)
	}
	return b
}

// Register registers (or registers again) an instance: POST /apps/{APP} with Netflix JSON,
// which Eureka (and Polaris) answer 204.
func (c *Client) Register(ctx context.Context, in Instance) error {
	if in.App == "" || in.ID == "" || in.IPAddr == "" {
		return fmt.Errorf("eurekatest.Register: instance %+v needs App, ID and IPAddr", in)
	}
	_, err := c.expect(ctx, http.MethodPost, "/apps/"+url.PathEscape(strings.ToUpper(in.App)), in.JSON(), http.StatusNoContent, http.StatusOK)
	return err
}

// Renew is a heartbeat: PUT /apps/{APP}/{ID}. found is false when the server answers 404,
// Eureka's way of asking for a registration. (Polaris answers 200 even for an unknown instance
// once it listed it.)
func (c *Client) Renew(ctx context.Context, app, id string) (found bool, err error) {
	st, err := c.expect(ctx, http.MethodPut, instancePath(app, id), nil, http.StatusOK, http.StatusNotFound)
	return st == http.StatusOK, err
}

// Cancel deregisters an instance: DELETE /apps/{APP}/{ID}. (Polaris answers 200 even for an
// unknown instance.)
func (c *Client) Cancel(ctx context.Context, app, id string) error {
	_, err := c.expect(ctx, http.MethodDelete, instancePath(app, id), nil, http.StatusOK)
	return err
}

// SetStatus sets a status override: PUT /apps/{APP}/{ID}/status?value=STATUS (e.g.
// OUT_OF_SERVICE).
func (c *Client) SetStatus(ctx context.Context, app, id, status string) error {
	_, err := c.expect(ctx, http.MethodPut, instancePath(app, id)+"/status?value="+url.QueryEscape(status), nil, http.StatusOK)
	return err
}

// ClearStatus removes a status override: DELETE /apps/{APP}/{ID}/status (the instance is UP
// again on Polaris).
func (c *Client) ClearStatus(ctx context.Context, app, id string) error {
	_, err := c.expect(ctx, http.MethodDelete, instancePath(app, id)+"/status", nil, http.StatusOK)
	return err
}

func instancePath(app, id string) string {
	return "/apps/" + url.PathEscape(strings.ToUpper(app)) + "/" + url.PathEscape(id)
}

// Applications is the JSON listing of /apps and /apps/delta, as far as the tests read it.
type Applications struct {
	VersionsDelta string        `json:"versions__delta"`
	AppsHashcode  string        `json:"apps__hashcode"`
	Application   []Application `json:"application"`
}

// Application is one application of a listing.
type Application struct {
	Name     string         `json:"name"`
	Instance []InstanceInfo `json:"instance"`
}

// InstanceInfo is one instance of a listing, as far as the tests read it.
type InstanceInfo struct {
	InstanceID       string            `json:"instanceId"`
	App              string            `json:"app"`
	HostName         string            `json:"hostName"`
	IPAddr           string            `json:"ipAddr"`
	VIPAddress       string            `json:"vipAddress"`
	Status           string            `json:"status"`
	OverriddenStatus string            `json:"overriddenStatus"`
	Port             PortInfo          `json:"port"`
	SecurePort       PortInfo          `json:"securePort"`
	Metadata         map[string]string `json:"metadata"`
	ActionType       string            `json:"actionType"`
	LeaseInfo        struct {
		// DurationInSecs is a string from Netflix, a number from Polaris.
		DurationInSecs json.Number `json:"durationInSecs"`
	} `json:"leaseInfo"`
}

// LeaseDuration is leaseInfo.durationInSecs, 0 when absent or not a number.
func (in *InstanceInfo) LeaseDuration() time.Duration {
	d, err := strconv.Atoi(strings.Trim(in.LeaseInfo.DurationInSecs.String(), `"`))
	if err != nil || d < 0 {
		return 0
	}
	return time.Duration(d) * time.Second
}

// PortInfo is {"$": 8080, "@enabled": "true"}; number and flag are accepted as JSON strings
// (Netflix) or as a number and a boolean (Polaris).
type PortInfo struct {
	Port    int
	Enabled bool
}

// UnmarshalJSON accepts both spellings.
func (p *PortInfo) UnmarshalJSON(b []byte) error {
	var raw struct {
		Port    json.RawMessage `json:"$"`
		Enabled json.RawMessage `json:"@enabled"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if len(raw.Port) > 0 {
		n, err := strconv.Atoi(strings.Trim(string(raw.Port), `"`))
		if err != nil {
			return fmt.Errorf("port %s: %w", raw.Port, err)
		}
		p.Port = n
	}
	if len(raw.Enabled) > 0 {
		e, err := strconv.ParseBool(strings.Trim(string(raw.Enabled), `"`))
		if err != nil {
			return fmt.Errorf("port @enabled %s: %w", raw.Enabled, err)
		}
		p.Enabled = e
	}
	return nil
}

// Find returns the instance app/id of the listing, or nil.
func (a *Applications) Find(app, id string) *InstanceInfo {
	for i := range a.Application {
		if !strings.EqualFold(a.Application[i].Name, app) {
			continue
		}
		for j := range a.Application[i].Instance {
			if a.Application[i].Instance[j].InstanceID == id {
				return &a.Application[i].Instance[j]
			}
		}
	}
	return nil
}

// Count is the number of instances in the listing.
func (a *Applications) Count() int {
	n := 0
	for _, app := range a.Application {
		n += len(app.Instance)
	}
	return n
}

// Apps reads path ("/apps" or "/apps/delta") as JSON.
func (c *Client) Apps(ctx context.Context, path string) (*Applications, error) {
	var doc struct {
		Applications Applications `json:"applications"`
	}
	if err := c.getJSON(ctx, path, &doc); err != nil {
		return nil, err
	}
	return &doc.Applications, nil
}

// App reads GET /apps/{APP} as JSON; nil when the server does not list the application (404).
func (c *Client) App(ctx context.Context, app string) (*Application, error) {
	var doc struct {
		Application Application `json:"application"`
	}
	err := c.getJSON(ctx, "/apps/"+url.PathEscape(strings.ToUpper(app)), &doc)
	if se, ok := errors.AsType[*StatusError](err); ok && se.Status == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &doc.Application, nil
}

// getJSON reads path as JSON into v.
func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	r, err := c.Do(ctx, http.MethodGet, path, "application/json", nil)
	if err != nil {
		return err
	}
	if r.Status != http.StatusOK {
		return &StatusError{Method: http.MethodGet, Path: path, Status: r.Status, Body: string(r.Body)}
	}
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("eureka GET %s: %w in %.300s", path, err, r.Body)
	}
	return nil
}

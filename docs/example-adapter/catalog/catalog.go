// Package catalog is a Galleon adapter for an HTTP service catalog.
//
// The catalog answers GET <base>/v1/services with the complete list of
// services as JSON, and an ETag. The adapter polls it, asking with
// If-None-Match, so that a catalog that has not changed answers 304 and
// costs neither side a listing:
//
//	[{"namespace": "shop", "name": "web",
//	  "hosts": ["web.shop.example"],
//	  "ports": [{"number": 80, "protocol": "HTTP", "name": "http"}],
//	  "instances": [{"id": "web-1", "address": "10.0.0.1", "labels": {"version": "v1"}}]}]
//
// The catalog has no notion of health: it lists the instances that are up,
// so every instance is reported Healthy and one that is gone is left out.
//
// All the Sink bookkeeping (Replace first and after an outage, Update and
// Delete only for what changed, each rejection once) is left to
// registry.Reconciler: the adapter only says what the catalog holds.
package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

const (
	// DefaultInterval is how often the catalog is polled unless
	// Config.Interval says otherwise. A poll of an unchanged catalog is a
	// 304 with no body, so polling often is cheap.
	DefaultInterval = time.Second

	// DefaultTimeout bounds one poll unless Config.Timeout says
	// otherwise, so that a catalog that accepts the connection and never
	// answers is reported unreachable rather than leaving the adapter
	// waiting (and serving silently stale state).
	DefaultTimeout = 10 * time.Second

	// maxListing bounds the body read, so that a misbehaving server
	// cannot make the adapter allocate without limit.
	maxListing = 64 << 20
)

// Config configures a catalog adapter.
type Config struct {
	// URL is the catalog's base URL, e.g. "http://catalog.example:8080".
	// The adapter lists <URL>/v1/services.
	URL string
	// Interval is the time between polls; 0 means DefaultInterval.
	Interval time.Duration
	// Timeout bounds one poll; 0 means DefaultTimeout.
	Timeout time.Duration
	// Client makes the requests; nil means a client of the adapter's own.
	// A Client passed in is the caller's: its idle connections are left
	// open when Run returns.
	Client *http.Client
	// Logger receives the adapter's own logs; nil means slog.Default().
	Logger *slog.Logger
}

// Registry polls one catalog. It holds configuration only: the state of a
// poll loop lives in Run, so a Registry can be run again after Run returns.
type Registry struct {
	listURL string // <URL>/v1/services
	source  string // listURL with any password masked, for records and logs
	every   time.Duration
	timeout time.Duration
	client  *http.Client
	// ownClient is set when the client is the adapter's, whose idle
	// connections Run closes before returning.
	ownClient bool
	log       *slog.Logger
}

var _ registry.Registry = (*Registry)(nil)

// New checks cfg and returns the adapter. Its errors are configuration
// errors: the daemon prints them and exits with status 2, rather than
// retrying something no retry can fix.
func New(cfg Config) (*Registry, error) {
	if cfg.URL == "" {
		return nil, errors.New("httpcatalog: the catalog URL is empty: set it to the catalog's base URL, e.g. http://catalog.example:8080")
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("httpcatalog: catalog URL %q: %w", cfg.URL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("httpcatalog: catalog URL %q: the scheme must be http or https, e.g. http://catalog.example:8080", cfg.URL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("httpcatalog: catalog URL %q has no host: give one, e.g. http://catalog.example:8080", cfg.URL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("httpcatalog: catalog URL %q: give the base URL without a query or fragment; the adapter appends /v1/services", cfg.URL)
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("httpcatalog: poll interval %v is negative: give a positive duration such as 1s, or 0 for the default (%v)", cfg.Interval, DefaultInterval)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("httpcatalog: timeout %v is negative: give a positive duration such as 10s, or 0 for the default (%v)", cfg.Timeout, DefaultTimeout)
	}
	r := &Registry{every: cfg.Interval, timeout: cfg.Timeout, client: cfg.Client, log: cfg.Logger}
	list := u.JoinPath("v1", "services")
	r.listURL, r.source = list.String(), list.Redacted()
	if r.every == 0 {
		r.every = DefaultInterval
	}
	if r.timeout == 0 {
		r.timeout = DefaultTimeout
	}
	if r.client == nil {
		// A transport of our own rather than http.DefaultTransport, so
		// that Run can close its idle keep-alive connections on the way
		// out: each holds two goroutines that Run started, and the
		// contract wants none left when Run returns.
		r.client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		r.ownClient = true
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	// No "registry" attribute: the daemon's logger carries it already.
	r.log = r.log.With("catalog", r.source)
	return r, nil
}

// Run polls the catalog every interval until ctx is cancelled, then
// returns ctx.Err(). It starts no goroutine of its own: the polls run one
// after the other on Run's goroutine, which is also the only one that
// calls the Sink, so nothing can call it after Run returned.
func (r *Registry) Run(ctx context.Context, sink registry.Sink) error {
	if r.ownClient {
		defer r.client.CloseIdleConnections()
	}
	r.log.Info("polling the catalog", "interval", r.every)
	rec := registry.NewReconciler(sink)
	// A ticker rather than a sleep after each poll: polls stay on a
	// steady beat, and ticks missed while a slow poll ran are dropped,
	// not queued.
	tick := time.NewTicker(r.every)
	defer tick.Stop()
	etag := ""
	for {
		etag = r.poll(ctx, rec, etag)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// poll asks the catalog once and tells rec what it learnt. It returns the
// ETag to send with the next poll.
func (r *Registry) poll(ctx context.Context, rec *registry.Reconciler, etag string) string {
	body, newTag, err := r.fetch(ctx, etag)
	if ctx.Err() != nil {
		// Cancelled, most likely mid-request: that says nothing about the
		// catalog, and Run is about to return.
		return etag
	}
	if err != nil {
		// Keep serving what we have; the Reconciler reports the outage
		// (at once, then the newest error at most every 30 s) and makes
		// the next Flush a Replace.
		rec.Unreachable(err)
		r.log.Debug("poll failed; retrying", "error", err, "in", r.every)
		// Forget the ETag: the relisting after an outage must be a full
		// one (a 304 has no listing to Flush), and a catalog that
		// restarted might reuse an old ETag for different content.
		return ""
	}
	if body == nil {
		return etag // 304 Not Modified: what we reported is still right
	}
	services, rejected, err := decode(r.source, body)
	if err != nil {
		// The catalog answered, but not with a listing we can trust: for
		// what is served, that is an outage like any other.
		rec.Unreachable(err)
		return ""
	}
	rec.SetAll(services)
	rec.SetRejections(rejected)
	rec.Flush()
	return newTag
}

// fetch lists the catalog. It returns the body and ETag of a 200, or a
// nil body for a 304, or an error for anything else (a transport error,
// a timeout, another status).
func (r *Registry) fetch(ctx context.Context, etag string) (body []byte, newTag string, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.listURL, nil)
	if err != nil {
		return nil, "", err // cannot happen: New checked the URL
	}
	req.Header.Set("Accept", "application/json")
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, "", err // *url.Error: names the URL, password masked
	}
	defer resp.Body.Close()
	// Read the body to its end whatever the status: the transport then
	// puts the connection back for the next poll instead of closing it.
	body, err = io.ReadAll(io.LimitReader(resp.Body, maxListing+1))
	switch {
	case err != nil:
		return nil, "", fmt.Errorf("reading the listing from %s: %w", r.source, err)
	case resp.StatusCode == http.StatusNotModified && etag != "":
		return nil, etag, nil
	case resp.StatusCode != http.StatusOK:
		// 5xx is the usual case; 4xx too is retried rather than fatal,
		// since a proxy in front of the catalog can answer 404 or 403
		// while the catalog restarts.
		return nil, "", fmt.Errorf("catalog %s answered %s", r.source, resp.Status)
	case len(body) > maxListing:
		return nil, "", fmt.Errorf("the listing from %s is larger than %d MiB", r.source, maxListing>>20)
	}
	return body, resp.Header.Get("ETag"), nil
}

// The catalog's wire format. Numbers are ints, not uint32, so that a
// negative or too large port decodes and is rejected with a clear message
// rather than failing the decoding.
type entry struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Hosts     []string   `json:"hosts"`
	Ports     []port     `json:"ports"`
	Instances []instance `json:"instances"`
}

type port struct {
	Number   int    `json:"number"`
	Protocol string `json:"protocol"`
	Name     string `json:"name"`
}

type instance struct {
	ID      string            `json:"id"`
	Address string            `json:"address"`
	Labels  map[string]string `json:"labels"`
}

// decode turns a listing into the services of its good entries and the
// rejections of its bad ones, by record name "<source>#<index>
// (<namespace>/<name>)": the index finds the entry in the listing, the key
// says what it meant to define. err is set only when the body is not a
// JSON array at all, when there is no listing to trust.
//
// Each entry is decoded on its own, so that an entry of the wrong shape
// (a port number given as a string) costs that entry only, not the
// listing.
func decode(source string, body []byte) (services []model.Service, rejected map[string]error, err error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, nil, fmt.Errorf("the listing from %s is not a JSON array of services: %w", source, err)
	}
	rejected = map[string]error{}
	first := map[model.ServiceKey]int{} // key -> index of the entry that defines it
	for i, msg := range raw {
		var e entry
		// Unmarshal fills what it can before a type error, so the record
		// name below still has the namespace and name when they were fine.
		err := json.Unmarshal(msg, &e)
		key := model.ServiceKey{Namespace: e.Namespace, Name: e.Name}
		record := fmt.Sprintf("%s#%d (%s)", source, i, key)
		if err == nil {
			err = e.validate()
		}
		if err == nil {
			if j, dup := first[key]; dup {
				// Served from one entry only, or the service would flap
				// between the two.
				err = fmt.Errorf("%s is already defined by entry #%d, which is served: remove one of them", key, j)
			}
		}
		if err != nil {
			rejected[record] = err
			continue
		}
		first[key] = i
		services = append(services, e.service())
	}
	return services, rejected, nil
}

// validate says what is wrong with an entry, in terms of what to fix. It
// checks what the model needs to hold the entry at all; the core checks
// the rest (host syntax, protocols) with istiod's own rules.
func (e *entry) validate() error {
	switch {
	case e.Namespace == "":
		return errors.New("no namespace: give the namespace the service belongs to")
	case e.Name == "":
		return errors.New("no name: give the service a name")
	case len(e.Hosts) == 0:
		return errors.New("no hosts: give at least one host name clients use")
	}
	for i, p := range e.Ports {
		if p.Number < 1 || p.Number > 65535 {
			return fmt.Errorf("port #%d: number %d is not in 1-65535", i, p.Number)
		}
	}
	ids := map[string]bool{}
	for i, inst := range e.Instances {
		switch {
		case inst.ID == "":
			return fmt.Errorf("instance #%d has no id: give each instance an ID that is stable across restarts", i)
		case inst.Address == "":
			return fmt.Errorf("instance #%d (%s) has no address: give its IP address or host name", i, inst.ID)
		case ids[inst.ID]:
			return fmt.Errorf("instance #%d: id %s is used twice: instance IDs must be unique within a service", i, inst.ID)
		}
		ids[inst.ID] = true
	}
	return nil
}

// service maps a valid entry onto the model. The values are fresh from
// the decoding and never touched again, so they can go to the Sink as
// they are; order does not matter either, since the Reconciler compares
// services by meaning.
func (e *entry) service() model.Service {
	svc := model.Service{
		Namespace: e.Namespace,
		Name:      e.Name,
		Hosts:     e.Hosts,
	}
	for _, p := range e.Ports {
		svc.Ports = append(svc.Ports, model.Port{
			Number: uint32(p.Number),
			// Istio spells protocols in upper case; catalogs are not
			// always that careful.
			Protocol: model.Protocol(strings.ToUpper(p.Protocol)),
			Name:     p.Name,
		})
	}
	for _, inst := range e.Instances {
		svc.Instances = append(svc.Instances, model.Instance{
			ID:      inst.ID,
			Address: inst.Address,
			Labels:  inst.Labels,
			Health:  model.Healthy, // listed means up: the catalog has no health
		})
	}
	return svc
}

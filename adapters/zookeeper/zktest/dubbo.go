package zktest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"

	"github.com/go-zookeeper/zk"
)

// DubboProvider is a Dubbo 2 provider's registration: a URL, whose URL-encoded form is the name
// of the provider's znode under /dubbo/<interface>/providers.
type DubboProvider struct {
	Interface string
	IP        string
	Port      int
	// Params are the URL's parameters (application, side, version, weight, ...); interface is
	// added. They are written sorted by key, as url.Values encodes them.
	Params url.Values
}

// URL is the provider's URL: dubbo://IP:PORT/INTERFACE?PARAMS.
func (p DubboProvider) URL() string {
	q := url.Values{}
	for k, v := range p.Params {
		q[k] = slices.Clone(v)
	}
	q.Set("interface", p.Interface)
	return fmt.Sprintf("dubbo://%s/%s?%s", net.JoinHostPort(p.IP, strconv.Itoa(p.Port)), p.Interface, q.Encode())
}

// Node is the name of the provider's znode: the URL encoded as Dubbo encodes it (URL.encode,
// Java's URLEncoder, which url.QueryEscape matches on the characters of such URLs).
func (p DubboProvider) Node() string { return url.QueryEscape(p.URL()) }

// Path is the provider's znode.
func (p DubboProvider) Path() string { return DubboProvidersPath(p.Interface) + "/" + p.Node() }

// DubboProvidersPath is the znode under which the providers of iface register.
func DubboProvidersPath(iface string) string { return "/dubbo/" + iface + "/providers" }

// DubboWriter registers and removes Dubbo 2 providers in ZooKeeper, as a provider's registry
// client does, except that the znodes are persistent unless Ephemeral: they outlive the writer's
// session (a demo that leaves ZooKeeper running).
type DubboWriter struct {
	Conn      *zk.Conn
	Ephemeral bool
}

// Register creates the provider's znode, and the interface's nodes it needs first.
func (w DubboWriter) Register(p DubboProvider) error {
	for _, dir := range []string{"/dubbo", "/dubbo/" + p.Interface, DubboProvidersPath(p.Interface)} {
		if _, err := w.Conn.Create(dir, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	var flags int32
	if w.Ephemeral {
		flags = zk.FlagEphemeral
	}
	if _, err := w.Conn.Create(p.Path(), nil, flags, zk.WorldACL(zk.PermAll)); err != nil {
		return fmt.Errorf("registering Dubbo provider %s: %w", p.URL(), err)
	}
	return nil
}

// Unregister deletes the provider's znode.
func (w DubboWriter) Unregister(p DubboProvider) error {
	if err := w.Conn.Delete(p.Path(), -1); err != nil {
		return fmt.Errorf("unregistering Dubbo provider %s: %w", p.URL(), err)
	}
	return nil
}

// Providers are the URLs of the providers of iface registered now, decoded and sorted.
func (w DubboWriter) Providers(iface string) ([]string, error) {
	nodes, _, err := w.Conn.Children(DubboProvidersPath(iface))
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", DubboProvidersPath(iface), err)
	}
	urls := make([]string, 0, len(nodes))
	for _, n := range nodes {
		u, err := url.QueryUnescape(n)
		if err != nil {
			return nil, fmt.Errorf("provider znode %q: %w", n, err)
		}
		urls = append(urls, u)
	}
	slices.Sort(urls)
	return urls, nil
}

package zookeeper

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// hostProvider is the order in which the client tries the ensemble's servers. It resolves the
// names once, at start, and shuffles them, as go-zookeeper's DNSHostProvider does; it differs in
// when the client pauses. DNSHostProvider asks for a pause (go-zookeeper sleeps 1 s) as soon as
// it comes back to the server the client was last connected to, so with one server every
// reconnection, even to a server that is back, started with that second, and a session expiry
// took that much longer to notice and converge (see docs/benchmarks.md,
// TestZooKeeperToIstiod). This one asks for the pause only once every server has been tried
// since the last connection: the first attempt after a loss is immediate, and a server that
// stays down is still tried once a second, not in a tight loop.
//
// A connection that a server drops soon after the session is established (flapTime) is not a
// recovery: each such drop doubles a wait before the next attempt, from flapBase to flapMax,
// with jitter, so that a server (or proxy) that accepts and drops cannot make a reconnection
// storm. A connection that lasts ends the backoff.
type hostProvider struct {
	mu      sync.Mutex
	servers []string
	curr    int
	// tries counts the attempts since the last successful connection.
	tries int
	// connectedAt is when the last connection got its session; flaps counts the connections
	// in a row that lasted less than flapTime.
	connectedAt time.Time
	flaps       int
	// quit ends a wait (Run is ending); nil: never.
	quit chan struct{}
	// sleep waits d or until quit is closed (tests replace it).
	sleep func(d time.Duration, quit <-chan struct{})
}

// Reconnection backoff after connections that do not last.
const (
	flapTime = 2 * time.Second
	flapBase = 100 * time.Millisecond
	flapMax  = 30 * time.Second
)

// lookupTimeout bounds the resolution of the servers' names.
const lookupTimeout = 3 * time.Second

// Init resolves servers ("host:port") to addresses.
func (p *hostProvider) Init(servers []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	var found []string
	for _, s := range servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return err
		}
		addrs, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			found = append(found, net.JoinHostPort(a, port))
		}
	}
	if len(found) == 0 {
		return fmt.Errorf("no address found for %q", servers)
	}
	// Spread the adapters of a fleet over the ensemble.
	rand.Shuffle(len(found), func(i, j int) { found[i], found[j] = found[j], found[i] })
	p.mu.Lock()
	defer p.mu.Unlock()
	p.servers, p.curr, p.tries = found, -1, 0
	return nil
}

// Len is the number of server addresses.
func (p *hostProvider) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.servers)
}

// Next returns the server to try next, and whether the client should pause first: every server
// has been tried since the last connection.
func (p *hostProvider) Next() (server string, pause bool) {
	p.mu.Lock()
	var wait time.Duration
	if !p.connectedAt.IsZero() {
		if time.Since(p.connectedAt) < flapTime {
			p.flaps++
			wait = backoff(flapBase, flapMax, p.flaps)
		} else {
			p.flaps = 0
		}
		p.connectedAt = time.Time{}
	}
	sleep, quit := p.sleep, p.quit
	p.mu.Unlock()
	if wait > 0 {
		if sleep == nil {
			sleep = sleepOrQuit
		}
		sleep(wait, quit)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.curr = (p.curr + 1) % len(p.servers)
	if p.tries >= len(p.servers) {
		pause, p.tries = true, 0
	}
	p.tries++
	return p.servers[p.curr], pause
}

// Connected records a successful connection (a session established on it).
func (p *hostProvider) Connected() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tries = 0
	p.connectedAt = time.Now()
}

// Expired records a server's answer that the session expired: the next attempt, for a new
// session, needs no pause.
func (p *hostProvider) Expired() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tries = 0
}

// Flaps is the number of connections in a row that did not last.
func (p *hostProvider) Flaps() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flaps
}

func sleepOrQuit(d time.Duration, quit <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-quit:
	}
}

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
// reconnection, even to a server that is back, started with that second: a session expiry took
// 2 s longer to notice and converge (measured by TestZooKeeperToIstiod and make demo). This
// one asks for the pause only once every server has been tried since the last connection: the
// first attempt after a loss is immediate, and a server that stays down is still tried once a
// second, not in a tight loop.
type hostProvider struct {
	mu      sync.Mutex
	servers []string
	curr    int
	// tries counts the attempts since the last successful connection.
	tries int
}

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
	defer p.mu.Unlock()
	p.curr = (p.curr + 1) % len(p.servers)
	if p.tries >= len(p.servers) {
		pause, p.tries = true, 0
	}
	p.tries++
	return p.servers[p.curr], pause
}

// Connected records a successful connection.
func (p *hostProvider) Connected() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tries = 0
}

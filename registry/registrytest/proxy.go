package registrytest

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy between an adapter and a network registry that can
// cut the connection: a Breaker for any registry reached over TCP (Consul,
// ZooKeeper, Eureka). Point the adapter at Addr instead of the registry;
// a Driver gets Break and Restore by embedding a *Proxy.
//
// Break closes every proxied connection and, until Restore, closes each new
// one as soon as it is accepted: to the adapter the registry is there and
// drops it, the way a registry that crashed behind a load balancer looks.
// The listener stays open, so Restore never races another process for the
// port.
//
// Silence plays the other way a registry fails, the one a client without
// timeouts hangs on: it accepts connections, reads what the adapter sends
// and never answers, on new connections and on those already open. A
// Driver offers it to the kit as a Staller (see there).
type Proxy struct {
	target string
	lis    net.Listener

	mu     sync.Mutex
	broken bool
	silent bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewProxy starts a proxy on 127.0.0.1 to target ("host:port"). It stops
// when the test ends, after every goroutine it started has returned.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := ListenProxy(t, "127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ListenProxy is NewProxy listening on addr ("host:port"), for clients that derive one port of
// a registry from another (Nacos's: gRPC on the HTTP port + 1000), so that two proxies can
// stand where the two ports would. It returns why it cannot listen there (a port taken: try
// another) rather than failing the test.
func ListenProxy(t testing.TB, addr, target string) (*Proxy, error) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: %w", target, err)
	}
	p := &Proxy{target: target, lis: lis, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept() // ends when the listener is closed, below
	t.Cleanup(func() {
		lis.Close()
		p.cut()
		p.wg.Wait()
	})
	return p, nil
}

// Addr is the address the adapter should dial.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// Break cuts every connection and refuses new ones until Restore.
func (p *Proxy) Break(context.Context) error {
	p.mu.Lock()
	p.broken = true
	p.mu.Unlock()
	p.cut()
	return nil
}

// Retarget sends new connections to target from now on and cuts those being proxied, the way
// a Service moves to another replica when its endpoint dies: the client reconnects to the same
// address and reaches the new one.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.cut()
}

// Silence makes the registry accept connections and never answer until
// Restore: what the adapter sends is read and dropped, and nothing comes
// back, on the connections open now and on new ones.
func (p *Proxy) Silence(context.Context) error {
	p.mu.Lock()
	p.silent = true
	p.mu.Unlock()
	return nil
}

// Restore proxies new connections again. After Silence it also cuts the
// connections that went silent: what they carried was dropped midway, so
// the adapter starts again on new ones.
func (p *Proxy) Restore(context.Context) error {
	p.mu.Lock()
	wasSilent := p.silent
	p.broken, p.silent = false, false
	p.mu.Unlock()
	if wasSilent {
		p.cut()
	}
	return nil
}

func (p *Proxy) isSilent() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.silent
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return // closed by the test's cleanup
		}
		p.mu.Lock()
		if p.broken {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		silent := p.silent
		p.mu.Unlock()
		if silent {
			go p.swallow(c) // ends when the client closes or cut closes c
			continue
		}
		go p.serve(c) // ends when either side closes or cut closes c
	}
}

// swallow reads what a client sends while the proxy is silent, answers
// nothing, and never reaches the registry.
func (p *Proxy) swallow(client net.Conn) {
	defer p.wg.Done()
	defer p.forget(client)
	_, _ = io.Copy(io.Discard, client)
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.forget(client)
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	upstream, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer upstream.Close()
	p.mu.Lock()
	if p.broken {
		p.mu.Unlock()
		return
	}
	p.conns[upstream] = struct{}{}
	p.mu.Unlock()
	defer p.forget(upstream)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		p.copy(dst, src)
		done <- struct{}{}
	}
	go pipe(upstream, client) // ends with the connection, as the other one
	go pipe(client, upstream)
	<-done
	// One direction ended: end both, so the other copy returns too.
	client.Close()
	upstream.Close()
	<-done
}

// copy copies src to dst until either fails, dropping what it reads while
// the proxy is silent.
func (p *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isSilent() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) forget(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// cut closes every connection being proxied.
func (p *Proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

package registrytest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// memListing is what the TCP fake registry answers to "LIST".
type memListing struct {
	Down     bool
	Services []model.Service
	Corrupt  []model.ServiceKey
}

// serveMem serves st over TCP: one JSON memListing line per "LIST" line.
func serveMem(t *testing.T, st *memStore) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go answer(c, st)
		}
	}()
	return lis.Addr().String()
}

func answer(c net.Conn, st *memStore) {
	defer c.Close()
	sc := bufio.NewScanner(c)
	enc := json.NewEncoder(c)
	for sc.Scan() {
		st.mu.Lock()
		l := memListing{Down: st.down}
		for _, k := range sortedKeys(st.services) {
			l.Services = append(l.Services, st.services[k])
		}
		l.Corrupt = sortedKeys(st.corrupt)
		st.mu.Unlock()
		if enc.Encode(l) != nil {
			return
		}
	}
}

// tcpRegistry polls the TCP fake registry, one connection per poll, and
// reports through a Reconciler. With bug "tcp-no-timeout" it waits for the
// answer without a deadline and without watching ctx, as a client without
// timeouts does.
type tcpRegistry struct {
	addr, bug string
}

func (r *tcpRegistry) Run(ctx context.Context, sink registry.Sink) error {
	rec := registry.NewReconciler(sink)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		l, err := r.list(ctx)
		switch {
		case ctx.Err() != nil:
		case err == nil && l.Down:
			rec.Unreachable(errors.New("mem: registry down"))
		case err != nil:
			rec.Unreachable(err)
		default:
			rejected := map[string]error{}
			for _, k := range l.Corrupt {
				rejected["mem:"+k.String()] = errors.New("malformed")
			}
			rec.SetAll(l.Services)
			rec.SetRejections(rejected)
			rec.Flush()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (r *tcpRegistry) list(ctx context.Context) (memListing, error) {
	var l memListing
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", r.addr)
	if err != nil {
		return l, err
	}
	defer c.Close()
	if r.bug != "tcp-no-timeout" {
		_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
		stop := context.AfterFunc(ctx, func() { c.Close() })
		defer stop()
	}
	if _, err := c.Write([]byte("LIST\n")); err != nil {
		return l, err
	}
	err = json.NewDecoder(c).Decode(&l)
	return l, err
}

// tcpDriver drives the store behind the TCP fake; Stall silences the proxy
// the adapter dials.
type tcpDriver struct {
	mem   memDriver
	proxy *registrytest.Proxy
}

func (d *tcpDriver) Put(ctx context.Context, svc model.Service) error { return d.mem.Put(ctx, svc) }
func (d *tcpDriver) Remove(ctx context.Context, key model.ServiceKey) error {
	return d.mem.Remove(ctx, key)
}
func (d *tcpDriver) Corrupt(ctx context.Context, key model.ServiceKey) (string, error) {
	return d.mem.Corrupt(ctx, key)
}
func (d *tcpDriver) Break(ctx context.Context) error { return d.mem.Break(ctx) }
func (d *tcpDriver) Stall(ctx context.Context) error { return d.proxy.Silence(ctx) }
func (d *tcpDriver) Restore(ctx context.Context) error {
	return errors.Join(d.proxy.Restore(ctx), d.mem.Restore(ctx))
}

func runTCPFake(t *testing.T, bug string, opts ...registrytest.Option) {
	st := newMemStore()
	proxy := registrytest.NewProxy(t, serveMem(t, st))
	registrytest.TestRegistry(t,
		func(*testing.T) registry.Registry { return &tcpRegistry{addr: proxy.Addr(), bug: bug} },
		&tcpDriver{mem: memDriver{st: st}, proxy: proxy}, opts...)
}

// TestTCPFakeConforms: an adapter that bounds its requests passes, the
// Stalled subtest included.
func TestTCPFakeConforms(t *testing.T) {
	runTCPFake(t, "", registrytest.WithOutage(200*time.Millisecond))
}

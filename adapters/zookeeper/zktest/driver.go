package zktest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// Writer writes Curator service znodes (<Root>/<name>/<id>) to a real ZooKeeper. Each write is
// one transaction, and idempotent (it reads what is there first), so a write whose connection
// broke is made again, for up to Timeout.
type Writer struct {
	Conn *zk.Conn
	Root string
	// Timeout bounds how long a write is tried again while the connection breaks; 0 means
	// 20 seconds.
	Timeout time.Duration
}

// EnsureRoot creates Root unless it exists.
func (w *Writer) EnsureRoot() error {
	return w.retry(func() error {
		_, err := w.Conn.Create(w.Root, nil, 0, zk.WorldACL(zk.PermAll))
		if errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return err
	})
}

// Set makes service name hold exactly nodes (id -> data), in one transaction.
func (w *Writer) Set(name string, nodes map[string][]byte) error {
	return w.retry(func() error { return w.trySet(name, nodes) })
}

func (w *Writer) trySet(name string, nodes map[string][]byte) error {
	p := w.Root + "/" + name
	existing, _, err := w.Conn.Children(p)
	var ops []any
	switch {
	case errors.Is(err, zk.ErrNoNode):
		ops = append(ops, &zk.CreateRequest{Path: p, Acl: zk.WorldACL(zk.PermAll)})
	case err != nil:
		return err
	}
	for _, id := range existing {
		if _, keep := nodes[id]; !keep {
			ops = append(ops, &zk.DeleteRequest{Path: p + "/" + id, Version: -1})
		}
	}
	ids := make([]string, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if slices.Contains(existing, id) {
			ops = append(ops, &zk.SetDataRequest{Path: p + "/" + id, Data: nodes[id], Version: -1})
		} else {
			ops = append(ops, &zk.CreateRequest{Path: p + "/" + id, Data: nodes[id], Acl: zk.WorldACL(zk.PermAll)})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	_, err = w.Conn.Multi(ops...)
	return err
}

// Remove deletes service name and its nodes, in one transaction.
func (w *Writer) Remove(name string) error {
	return w.retry(func() error { return w.tryRemove(name) })
}

func (w *Writer) tryRemove(name string) error {
	p := w.Root + "/" + name
	existing, _, err := w.Conn.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	var ops []any
	for _, id := range existing {
		ops = append(ops, &zk.DeleteRequest{Path: p + "/" + id, Version: -1})
	}
	ops = append(ops, &zk.DeleteRequest{Path: p, Version: -1})
	_, err = w.Conn.Multi(ops...)
	return err
}

// retry calls write until it succeeds, fails for another reason than the connection, or
// Timeout has passed.
func (w *Writer) retry(write func() error) error {
	deadline := time.Now().Add(cmp.Or(w.Timeout, 20*time.Second))
	for {
		err := write()
		if err == nil || !connectionError(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// connectionError: the write failed because the session or connection went.
func connectionError(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrClosing) ||
		errors.Is(err, zk.ErrSessionMoved)
}

// CuratorJSON is what Curator's JsonInstanceSerializer writes for a Spring Cloud Zookeeper
// instance listening on port (and sslPort when not 0), with metadata meta.
func CuratorJSON(name, id, address string, port, sslPort int, meta map[string]string) []byte {
	if meta == nil {
		meta = map[string]string{}
	}
	var ssl any
	if sslPort != 0 {
		ssl = sslPort
	}
	b, err := json.Marshal(map[string]any{
		"name": name, "id": id, "address": address, "port": port, "sslPort": ssl,
		"payload": map[string]any{
			"@class":   "org.springframework.cloud.zookeeper.discovery.ZookeeperInstance",
			"id":       name + "-" + id,
			"name":     name,
			"metadata": meta,
		},
		"registrationTimeUTC": 1700000000000,
		"serviceType":         "DYNAMIC",
		"uriSpec":             map[string]any{"parts": []map[string]any{{"value": "scheme", "variable": true}, {"value": "://", "variable": false}}},
	})
	if err != nil {
		panic(err)
	}
	return b
}

// CuratorDriver is the conformance kit's driver (registrytest.Driver, Corrupter and, through
// its Proxy, Breaker and Staller) for the Curator layout: it writes the kit's services as Curator instance
// nodes with W. Unhealthy instances carry instance_status DOWN, Draining ones OUT_OF_SERVICE
// (Spring's status); labels are metadata. Corrupt adds a node that is not JSON (record: its
// path). The adapter under test reaches the server through Proxy.
type CuratorDriver struct {
	*registrytest.Proxy
	W *Writer
}

var (
	_ registrytest.Driver    = (*CuratorDriver)(nil)
	_ registrytest.Corrupter = (*CuratorDriver)(nil)
	_ registrytest.Breaker   = (*CuratorDriver)(nil)
	_ registrytest.Staller   = (*CuratorDriver)(nil)
)

// Stall makes the server accept the adapter's connections and never answer (Proxy.Silence);
// Restore ends it.
func (d *CuratorDriver) Stall(ctx context.Context) error { return d.Proxy.Silence(ctx) }

// Put writes svc's instances, on its first port, in one transaction.
func (d *CuratorDriver) Put(_ context.Context, svc model.Service) error {
	nodes := map[string][]byte{}
	for _, inst := range svc.Instances {
		meta := map[string]string{}
		for k, v := range inst.Labels {
			meta[k] = v
		}
		switch inst.Health {
		case model.Unhealthy:
			meta["instance_status"] = "DOWN"
		case model.Draining:
			meta["instance_status"] = "OUT_OF_SERVICE"
		}
		nodes[inst.ID] = CuratorJSON(svc.Name, inst.ID, inst.Address, int(svc.Ports[0].Number), 0, meta)
	}
	return d.W.Set(svc.Name, nodes)
}

// Remove deletes the service znode and its instances.
func (d *CuratorDriver) Remove(_ context.Context, key model.ServiceKey) error {
	return d.W.Remove(key.Name)
}

// Corrupt adds to the service a node that is not JSON, and returns its path.
func (d *CuratorDriver) Corrupt(_ context.Context, key model.ServiceKey) (string, error) {
	id := key.Name + "-bad"
	return d.W.Root + "/" + key.Name + "/" + id, d.W.Set(key.Name, map[string][]byte{id: []byte(`{"name": "` + key.Name + `", "address": `)})
}

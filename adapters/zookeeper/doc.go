// Package zookeeper is Galleon's adapter for services registered in Apache ZooKeeper.
//
// It reads the Apache Curator ServiceDiscovery layout, which Spring Cloud Zookeeper uses:
// <root>/<name>/<id>, one znode per instance holding a Curator ServiceInstance as JSON, one
// service per <name>; or (Config.Layout) Dubbo 2's interface-level layout,
// <root>/<interface>/providers/<URL-encoded provider URL>, one service per interface, group and
// version; or Dubbo 3's application-level layout, <root>/<application>/<ip:port>. Config.Layout
// may list several layouts, served side by side from one session, each under its own root
// (layouts.go): Curator and Dubbo 3 may share one, their instance nodes told apart one by one
// (shared), and a name two layouts' services map to is served for the first layout listed, the
// others rejected (claims.go). See docs/adapters/zookeeper.md for the mapping rule by rule.
//
// Dubbo 2 registers one provider URL per protocol, so a host exporting an interface over tri and
// dubbo has two nodes with one address: they are one instance serving both ports (mergeHosts),
// with the ID of its smallest port, the union of the labels (the smallest port's value on a
// conflict), the smallest weight given, and health Healthy only when every URL is. Operators'
// overrides (configurators) are decided per URL, so per port; but a ServiceEntry endpoint serves
// every port of its ServiceEntry (istiod's serviceentry/conversion.go makes an instance of each
// endpoint for each service port, on the port its "ports" map gives or else the service port's
// own number), so a host cannot be left out of one port alone: a host with a port disabled is
// drained on all of them. That fails closed: a port an operator disabled gets no traffic from
// the mesh, at the cost of the host's other ports.
//
// Watching costs what changes: a children watch on each root, a children watch per service and a
// data watch per instance node, every one re-armed by re-reading the path it fired on, and
// only that path. All events reach one queue through the client's event callback, so there is
// no goroutine per watch and a service that is removed leaves nothing behind (deleting a znode
// fires, and so ends, every watch on it). Listing (at start and after a session expiry) reads
// with bounded concurrency over the one connection.
//
// Sessions: a disconnection is reported unreachable only if it outlasts UnreachableAfter;
// within the session the client reconnects with its watches (ZooKeeper replays what fired
// meanwhile), so nothing is relisted. A session expiry loses every watch: the adapter relists
// everything on the new session, and the Reconciler reports only what differs.
package zookeeper

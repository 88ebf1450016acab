// Package nacos is Galleon's adapter for Alibaba Nacos registries (1.x, 2.x, 3.x, and servers
// with Nacos's API such as PolarisMesh's): Registry watches one server at a time (several for
// failover) and maps each Nacos service, one per (namespace, group, service), to one
// model.Service (mapping.go, naming.go; Dubbo's services in dubbo.go).
//
// How it watches (watch.go): on Nacos 2 and 3, over the gRPC API (the server's HTTP port plus
// 1000), it lists the services of every namespace and group watched, page by page
// (discovery.go), subscribes to each, and applies what the server pushes
// (NotifySubscriberRequest): a change reaches istiod as a push, not a poll, and a new service
// within one --nacos-discovery-interval. Reconnects subscribe again and report only what
// differs, unless the registry was reported Unreachable meanwhile (then a Replace). On Nacos
// 1.x (no gRPC port) it reads the HTTP OpenAPI with Nacos 1's own watch: /v1/ns/instance/list
// registering for the UDP push, and each service read again at its cacheMillis as the safety
// net. Which server is watched, and which are reported Degraded, is failover.go; what a
// session is, in either API, conn.go; the services held and the rule for two Nacos services
// that map to one ServiceKey, state.go.
//
// The adapter speaks Nacos's protocol itself (internal/wire) rather than through
// github.com/nacos-group/nacos-sdk-go: the client keeps global state and writes log files and
// a disk cache of its own, and cannot be bounded or cancelled as a mesh component must be.
// internal/wire's package comment gives the reasons in full.
//
// Config and its flags (config.go, flags.go) are what cmd/galleon-nacos wires;
// docs/adapters/nacos.md describes it rule by rule. nacostest runs a real server with Nacos's
// API (Polaris) for the tests.
package nacos

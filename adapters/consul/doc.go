// Package consul is a Galleon adapter for HashiCorp Consul: it watches the
// catalog of one or more datacenters through a Consul agent and reports
// every service as a model.Service (see docs/adapters/consul.md for the
// mapping and the flags).
//
// # Watching
//
// One long-poll per service would hit the agent's limit of 200 HTTP
// connections per client at 200 services. Instead, per datacenter, three
// blocking queries are change signals:
//
//   - /v1/catalog/services (names and tags) says which services appeared,
//     disappeared or changed tags;
//   - /v1/health/state/critical and /v1/health/state/warning list the
//     failing checks, from Consul's status index (fast whatever the
//     number of checks): a check that enters or leaves either set is a
//     health flip (or a failing check created or deleted), and names its
//     service, or for a node check every service on the node. Their
//     responses are as small as the sets of failing checks, not a listing
//     of every check (see docs/benchmarks.md, "Consul adapter at 10,000
//     services x 5 instances", TestScale). They start from a listing of
//     every check, read once per (re)start.
//
// Only the services a signal names are fetched, with
// /v1/health/service/<name> (every instance, healthy or not), at most
// Config.FetchConcurrency at a time over all datacenters.
//
// A catalog change that changes no name or tag is attributed through the
// checks: an agent writes a service together with its checks, so a checked
// instance registered or deregistered, or retagged, wrote a check in the
// same raft index. Passing checks are in neither signal, so the adapter
// reads the checks table's index (a non-blocking /v1/health/state/critical:
// every state shares it) and, if a check was written at or after the
// catalog change's index, every check once, diffed against the last full
// listing: the checks created or rewritten at that index, or deleted when
// the table's index is that one, name the service. When no check was written there (a port,
// meta, address or weight edit of an instance whose checks did not change;
// a check-less instance), or nothing attributes the change, a sweep finds
// it: every service is probed for its X-Consul-Index with a filter that
// matches no instance (an empty body), and only those whose index moved
// are fetched. Such sweeps run at most once per Config.SweepInterval, and
// every Config.Resync in any case, because node changes (a node's address)
// move no signal at all.
//
// With Config.ServiceWatches, up to that many services are each followed by
// a blocking /v1/health/service/<name> of their own (servicewatch.go): its
// answers are fetches, so a watched service needs no signal, attribution
// or sweep to name it, and every change to it is served in milliseconds.
// The watches share a few connections over HTTP/2, which the agent speaks
// on its HTTPS listener only; over HTTP/1.1 none is started.
//
// The blocking index follows Consul's rules: an index that goes backwards
// (a restored snapshot, a wiped data directory) resynchronises the
// datacenter from index 0 and, once it is listed again, reports what
// changed; an index of 0 is clamped to 1 so that the next query blocks.
// Failed requests are retried with jittered exponential backoff
// (Config.RetryMin to RetryMax).
//
// # Reporting
//
// Each datacenter contributes a part to a service; the parts of every
// datacenter merge into the model.Service handed to a
// registry.Reconciler, which tells the Sink what changed. Nothing is
// reported while a datacenter is being listed (at start, after an outage,
// after its index went backwards, when it is added): what it contributes
// is reported once it is listed.
//
// # Outages
//
// A failed request reports Unreachable(err) at once (and again only as
// registry.Reconciler.Unreachable allows); nothing is removed while it
// lasts, nothing else is reported, and before the first complete listing
// nothing but Unreachable is reported at all. When every request to the
// datacenter succeeds again, the datacenter is listed again from scratch
// if one of its signals failed (a failed per-service request is retried
// until it succeeds, so it misses nothing), the result is reported with
// Replace, and Unreachable(nil) follows.
//
// With several datacenters, one whose requests fail while another
// answers is one part of the registry down: it is reported with
// Degraded(dc, err) instead, the other datacenters' changes go on being
// reported, and once it answers again and is listed again, what changed
// is reported with Update and Delete, then Degraded(dc, nil).
package consul

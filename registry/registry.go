// Package registry is the contract between Galleon's core and an adapter.
//
// An adapter implements Registry: it watches one service registry and reports
// what it holds to a Sink, in terms of the registry-neutral model. It knows
// nothing of ServiceEntries, snapshots or gRPC. The core implements Sink: it
// coalesces reports, converts them, validates the result and serves it.
//
// The contract, which registrytest checks for any implementation:
//   - Run reports the complete state with Replace once it has listed the
//     registry, and again whenever it has to resynchronise from scratch,
//     which includes after every outage: what changed while the registry
//     could not be reached is learnt by listing it again. (A registry whose
//     watches survive a reconnect, so that no change can be missed, such as
//     ZooKeeper within its session, may skip it; registrytest.WithoutRelist.)
//   - Run reports no Update or Delete before the first Replace.
//   - Between Replace calls it reports each change with Update (the complete
//     new state of one service) or Delete, and only changes: a service
//     listed again unchanged is not reported.
//   - A malformed registry record is skipped and reported with Rejected; it
//     never aborts Run and never causes a Replace without the services whose
//     records were fine. Its error carries the reason it is counted under
//     (Reason: a short snake_case word such as "port"; a few of them, not
//     one per record).
//   - When the registry cannot be reached, Run reports it with Unreachable and
//     keeps retrying; it does not report an empty Replace. The core keeps
//     serving the last good state. A registry that accepts connections and
//     never answers cannot be reached either: every request is bounded by a
//     timeout.
//   - When one part of the registry cannot be reached while the rest
//     answers (a datacenter, one of several servers, a member of an
//     ensemble), Run reports it with Degraded(part, err), not Unreachable.
//     What was listed from that part stays served, and the part's return
//     calls for no Replace: the adapter relists the part, reports what
//     changed with Update and Delete, then Degraded(part, nil). part names
//     it for an operator ("dc2", "eureka-2:8761"); a registry has a
//     handful of parts, not thousands.
//   - A watch that lost events (a gap in a stream, an index the server no
//     longer holds, a session that expired) is a resynchronisation from
//     scratch like an outage: the adapter lists the registry again and
//     reports it with Replace (Reconciler.Resync). A registry whose
//     reconnects lose nothing (registrytest.WithoutRelist) may instead
//     report the difference the full listing makes to what it reported,
//     with Update and Delete, as galleon-zookeeper does after an expiry.
//   - An answer that would remove every service, or most of them, is a
//     claim the core checks: it holds such removals (the services stay
//     served) until the registry has said the same for a while (the
//     daemon's --removal-hold), and a report that lists them again ends
//     the hold. So an adapter reports what its registry answers, and when
//     an answer looks wrong (empty where there were services) it gathers
//     evidence within that window: it asks again, or asks another server,
//     and reports what it learns. A registry path that does not exist
//     (a missing root) is an error (Unreachable), not an empty registry.
//   - An instance the core cannot serve is left out of its service and
//     listed as rejected; the rest of the service is served. A service is
//     refused whole only for what is wrong with the service itself (its
//     name, hosts, ports): an adapter that builds those from its
//     instances' records checks each record's part and rejects the
//     record, not the service.
//   - Values passed to the Sink are the Sink's: the adapter does not modify
//     them afterwards.
//   - Run returns when ctx is cancelled, after every goroutine it started has
//     stopped, and makes no Sink call after it returned.
//
// The adapter need not name its registry in model.Service.Registry: the
// daemon records its Spec.Registry on every service.
//
// Reconciler does the bookkeeping these rules need (what was reported, when a
// Replace is due, which rejections were told): an adapter hands it what the
// registry holds and calls Flush.
//
// This comment is the one statement of the contract: the adapter guide
// (docs/authoring-adapters.md), docs/architecture.md and the registrytest
// documentation point here rather than restate it.
package registry

import (
	"context"

	"github.com/galleon-mesh/galleon/model"
)

// Registry watches one service registry.
type Registry interface {
	// Run watches the registry and reports to sink until ctx is cancelled.
	// It returns ctx.Err() on cancellation, or an error it cannot recover
	// from (bad configuration); transient registry errors are retried.
	Run(ctx context.Context, sink Sink) error
}

// Sink receives what a Registry sees. Its methods are safe for concurrent
// use and return quickly: they record the report and leave the work to the
// core. Values passed in belong to the Sink from then on: the adapter must
// not modify them (or anything they point to) afterwards, which spares the
// core a deep copy of every service on every report.
type Sink interface {
	// Replace reports the complete set of services. Any service reported
	// before and missing from services is removed. The first Replace marks
	// the registry as synced.
	Replace(services []model.Service)
	// Update reports the complete new state of one service, added or changed.
	Update(service model.Service)
	// Delete reports that a service is gone.
	Delete(key model.ServiceKey)
	// Rejected reports a registry record that was skipped because it is
	// malformed. record names it so an operator can find it (a file and line,
	// a Consul service ID, a ZooKeeper path). Rejected(record, nil) clears
	// a rejection reported before: the record is fine now, or gone. The core
	// lists the rejections that apply in /debug/status.
	Rejected(record string, err error)
	// Unreachable reports that the registry cannot be reached (err != nil)
	// and the state served is stale, or that it is reachable again (nil).
	Unreachable(err error)
	// Degraded reports that one part of the registry cannot be reached
	// (err != nil) while the rest can: a datacenter, one of several servers,
	// a member of an ensemble. What was listed from that part stays served;
	// Degraded(part, nil) says it is back. Unlike an outage it calls for no
	// Replace: the adapter relists the part and reports what changed with
	// Update and Delete. part names it for an operator ("dc2",
	// "eureka-2:8761"); a registry has a handful, not thousands.
	Degraded(part string, err error)
}

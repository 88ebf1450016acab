// Package kubewrite writes what the snapshot holds to the Kubernetes API, beside the MCP
// servers: the same validated ServiceEntries and WorkloadEntries, as objects that istiod's
// Kubernetes registry, its ambient index (which reads ServiceEntries and WorkloadEntries only
// from Kubernetes informers), kubectl and GitOps tools all see.
//
// The contract, once:
//
//   - What is written. Each resource of a ready snapshot, under its own namespace and name,
//     with server-side apply under one field manager. It carries the resource's labels and
//     annotations and three more: LabelOwner (who wrote it: one Galleon process or fleet of
//     replicas), LabelRegistry (the registry it came from) and AnnotationContentHash (the
//     resource's version in the snapshot).
//   - When. Only when the content hash differs from what the API server holds: a restart, or a
//     replica taking over, lists what the owner wrote and rewrites nothing already right. A
//     registry storm is coalesced: a round writes the newest version of what changed, never
//     each version in turn, and every request passes the client's rate limiter.
//   - What is never touched. An object of the same name that another owner wrote (or that
//     carries no owner label) is reported (log, galleon_kubernetes_conflicts) and left as it
//     is. Deletes name the UID of the object this owner wrote.
//   - Removal. A resource the snapshot no longer holds is deleted once it has been absent for
//     RemovalDelay; it stays if it comes back meanwhile. A snapshot that is not ready writes and
//     deletes nothing, and the core keeps the last good state through a registry outage, so an
//     outage deletes nothing. An API server outage loses nothing either: failed writes are
//     retried with backoff from what the snapshot holds then.
//   - Namespaces. A namespace that does not exist is created (CreateNamespaces) or reported,
//     and retried.
//
// One Writer runs per process; which replica of several writes is decided outside it.
package kubewrite

// Package xds serves snapshots to istiod and other clients over the xDS
// Aggregated Discovery Service: MCP over xDS, as istiod reads it from a
// `configSources: xds://` address.
//
// It knows nothing of registries. It reads immutable snapshots from a
// Source and decides, per stream and per type URL, what to send and when:
//
//   - StreamAggregatedResources (SotW), what istiod uses: every requested
//     type is answered, unknown ones with an empty response, because istiod
//     is not Ready until every type it asked for was answered. Each response
//     is the full state of its type, every resource wrapped in an
//     istio.mcp.v1alpha1.Resource. At most one response per type is
//     unacknowledged; a NACKed version is not sent again.
//   - DeltaAggregatedResources: only added, changed and removed resources,
//     per-resource versions, wildcard and named subscriptions, and resume
//     from initial_resource_versions.
//
// A SotW response is encoded once per collection version and type URL and
// the same bytes are written to every stream (see Collection.Memo and
// codec.go): a change costs one encoding, not one per sink.
package xds

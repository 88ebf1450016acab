// Package sidecar is a sidecar's view of istiod for tests: it fetches the xDS a real Envoy
// sidecar of a pod receives and answers, from that config alone, "where does a connection from
// this pod go?".
//
//	v, err := sidecar.Fetch(ctx, ist.GRPCAddr, sidecar.Pod{Name: "client-0", Namespace: "shop", IP: "10.99.0.1"})
//	d, err := v.Dial("240.100.0.1", 20880)          // d.Listener, d.FilterChain, d.Cluster, d.Passthrough()
//	d, err = v.HTTP("192.0.2.10", 8080, "web.shop.internal")
//	eps, err := v.Endpoints(d.Cluster)              // ["10.20.1.1:20880", ...]
//	ips := v.Resolve("order.dubbo.internal")        // what DNS capture answers
//
// Fetch opens one ADS stream (state of the world) to istiod's plain-text xDS port with the node
// id and metadata istio-proxy sends (ISTIO_VERSION, CLUSTER_ID "Kubernetes", NAMESPACE, LABELS,
// INTERCEPTION_MODE REDIRECT, DNS_CAPTURE and DNS_AUTO_ALLOCATE "true", ...), subscribes to CDS,
// LDS and NDS, then to EDS for the EDS clusters and RDS for the route configs the listeners
// name, ACKs every response, and returns once every type and name is answered. Every Fetch is a
// new connection, so a test calls it again after a change (polling until the view shows it).
//
// Envoy rules modelled:
//   - Hand-off by the virtual outbound listener (the one outbound listener with
//     use_original_dst): to the listener whose address or additional address is exactly ip:port,
//     else the unspecified address of ip's family on port (for IPv4 also [::]:port with
//     ipv4_compat), else the virtual listener keeps the connection.
//   - Filter chain match, criteria in Envoy's order, each keeping only the most specific chains
//     that match, never falling back to a less specific chain when a later criterion fails:
//     destination_port (chains naming the port, else chains naming none); prefix_ranges (longest
//     prefix, no ranges = /0); server_names (exact, then longest "*.suffix", else none; a
//     plain-text connection has no SNI); transport_protocol (exact, else none; plain text is
//     "raw_buffer"); application_protocols (the first of the connection's ALPNs any chain lists,
//     else none). No chain left: default_filter_chain, or the connection is closed. Two chains
//     left: an error (Envoy rejects such a listener).
//   - ALPN: Dial's connection has none; HTTP's is "http/1.1" when the virtual or the target
//     listener has an http_inspector listener filter (it detects HTTP/1.1 bytes), none
//     otherwise.
//   - The terminal (last) network filter: tcp_proxy (cluster or weighted clusters), or the HTTP
//     connection manager (rds or inline route_config).
//   - Virtual host by Host header, case-insensitively: port stripped when the route config has
//     ignore_port_in_host_matching or the HCM strip_any_host_port or (for the connection's port)
//     strip_matching_host_port; then an exact domain, the longest "*suffix", the longest
//     "prefix*" (a wildcard stands for at least one character), "*". The first route whose
//     prefix, path or path_separated_prefix takes "GET /" (case_sensitive honoured); its cluster,
//     weighted clusters, direct response or redirect.
//   - Endpoints: the EDS load assignment (by eds_cluster_config.service_name, else the cluster
//     name), or the load_assignment of a STATIC, STRICT_DNS or LOGICAL_DNS cluster.
//   - Resolve: istio-agent's DNS proxy table built from NDS (pkg/dns/client BuildAlternateHosts):
//     a non-Kubernetes entry answers its own name; a Kubernetes one under svc.cluster.local also
//     "name.namespace", "name.namespace.svc", "name" in the pod's namespace, and its alt_hosts.
//
// Not modelled, and failing loudly rather than guessed: filter_chain_matcher (the unified
// matcher API; istiod 1.29 uses it only for waypoints), chains matching on the source
// (direct_source_prefix_ranges, source_type, source_prefix_ranges, source_ports), an
// http_inspector with filter_disabled, terminal filters other than tcp_proxy and the HCM,
// virtual hosts with a matcher, routes matching on headers, query parameters or anything but
// the path (including regex paths), cluster_header and cluster_specifier_plugin actions,
// custom cluster types.
//
// Not modelled at all: TLS origination or detection (every connection is plain text, so an
// SNI or "tls" chain is never chosen by Dial or HTTP), listener filters other than
// http_inspector (original_dst and tls_inspector change nothing for plain text), HTTP/2 and h2c
// detection, RBAC or any other filter that could reject a connection, cluster load balancing,
// endpoint health status (Endpoints lists every endpoint), outlier detection, retries, DNS
// search-domain expansion, and EnvoyFilter patches beyond what istiod sends.
package sidecar

// Package conformance checks Galleon's core (snapshot store, pipeline and xDS server, wired as
// the daemons wire them) with the client istiod itself uses for `configSources: xds://...`:
// istio.io/istio/pkg/adsc of Istio 1.29.2, constructed as pilot/pkg/bootstrap/configcontroller.go
// constructs it, filling the same in-memory config store (pilot/pkg/config/memory) whose events
// feed istiod's ServiceEntry controller.
//
// Unlike test/e2e it needs no istiod binary: the client runs in the test process, so the tests
// can look at exactly what istiod's store holds (names, resourceVersion, creationTimestamp, spec)
// and at the store events istiod would react to.
//
// Run: cd test && go test ./conformance/
package conformance

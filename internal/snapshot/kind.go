package snapshot

// Kind is a kind of Istio resource that Galleon serves. Each kind is one
// collection in a snapshot.
type Kind int

// The kinds Galleon serves.
const (
	ServiceEntry Kind = iota
	WorkloadEntry
	numKinds
)

// Kinds returns every kind, in a fixed order.
func Kinds() []Kind { return []Kind{ServiceEntry, WorkloadEntry} }

// String returns the Kubernetes kind name.
func (k Kind) String() string {
	switch k {
	case ServiceEntry:
		return "ServiceEntry"
	case WorkloadEntry:
		return "WorkloadEntry"
	}
	return "Unknown"
}

// BodyTypeURL is the type URL of the resource body inside an MCP Resource.
// istiod expects the v1alpha3 message name whatever API version it asked
// for: the schema is the same.
func (k Kind) BodyTypeURL() string {
	switch k {
	case ServiceEntry:
		return "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry"
	case WorkloadEntry:
		return "type.googleapis.com/istio.networking.v1alpha3.WorkloadEntry"
	}
	return ""
}

// MCPResourceTypeURL is the type URL of every resource Galleon sends: an
// istio.mcp.v1alpha1.Resource wrapping the body.
const MCPResourceTypeURL = "type.googleapis.com/istio.mcp.v1alpha1.Resource"

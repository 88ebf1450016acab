package wire

// The shapes below are what a Nacos server answers, in both of its APIs: the 1.x HTTP OpenAPI
// (/nacos/v1/ns/instance/list, the UDP push) and the 2.x gRPC API (the JSON bodies of
// SubscribeServiceResponse, NotifySubscriberRequest, QueryServiceResponse) use the same field
// names. Decoders bound what they accept (see the package comment); these types hold what was
// accepted.

// Instance is one instance of a service.
type Instance struct {
	InstanceID  string            `json:"instanceId"`
	IP          string            `json:"ip"`
	Port        int               `json:"port"`
	Weight      float64           `json:"weight"`
	Healthy     bool              `json:"healthy"`
	Enabled     bool              `json:"enabled"`
	Ephemeral   bool              `json:"ephemeral"`
	ClusterName string            `json:"clusterName"`
	ServiceName string            `json:"serviceName"`
	Metadata    map[string]string `json:"metadata"`
}

// ServiceInfo is the state of one service as a subscriber sees it: its instances (healthy or
// not; enabled or not, as the server sends them) and what the server says about them.
type ServiceInfo struct {
	// Name is the service's name; Nacos 2 sends the bare name, Nacos 1 "group@@name". Callers
	// use Ref, not Name, to know which service this is.
	Name      string `json:"name"`
	GroupName string `json:"groupName"`
	Clusters  string `json:"clusters"`
	// CacheMillis is how long the server tells a client to trust this answer (Nacos 1's poll
	// interval).
	CacheMillis int64      `json:"cacheMillis"`
	Hosts       []Instance `json:"hosts"`
	// LastRefTime is the server's time of this state, in milliseconds: a push older than the
	// state held is stale.
	LastRefTime int64  `json:"lastRefTime"`
	Checksum    string `json:"checksum"`
	// ReachProtectionThreshold says the server applied the service's protect threshold: too
	// few instances are healthy, so it answered with all of them (Nacos 1 names the field
	// reachProtectThreshold in some answers; decoders accept both).
	ReachProtectionThreshold bool `json:"reachProtectionThreshold"`
}

// Ref names one Nacos service: namespace (tenant) ID, group and service name as the server
// holds them. Namespace "" is the default namespace ("public").
type Ref struct {
	Namespace, Group, Service string
}

// ServicePage is one page of a service listing of one (namespace, group).
type ServicePage struct {
	// Count is the number of services in (namespace, group), all pages together.
	Count int
	// Names are this page's service names.
	Names []string
}

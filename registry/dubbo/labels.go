package dubbo

import (
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// Dubbo 3's instance metadata (ServiceInstanceMetadataUtils, MetadataServiceURLParamsMetadataCustomizer,
// DefaultMetadataParamsFilter), the same in every registry Dubbo 3 registers applications in.
const (
	// EndpointsKey is ENDPOINTS: a JSON array, as a string, of the protocols the instance
	// serves and their ports (ProtocolPortsMetadataCustomizer); see Protocols.Endpoints.
	EndpointsKey = "dubbo.endpoints"
	// RevisionKey is EXPORTED_SERVICES_REVISION_PROPERTY_NAME: the hash of the application's
	// exported services, which consumers use to fetch its interfaces.
	RevisionKey = "dubbo.metadata.revision"
	// RevisionLabel is the label the revision is served as.
	RevisionLabel = "dubbo-revision"
	// bookkeeping is the prefix of Dubbo's own metadata (endpoints, metadata service URL
	// parameters and URLs, storage type, cluster): none of it is a label.
	bookkeeping = "dubbo."
	// MaxLabels bounds an instance's labels: Dubbo copies instance parameters and environment
	// labels (DUBBO_LABELS) into the metadata, and every label is in the WorkloadEntry istiod
	// pushes.
	MaxLabels = 32
	// MaxLabelValue is Kubernetes' label value limit: a longer value (a JSON blob, a URL) is
	// left out rather than cut and hashed by the core into something no selector matches.
	MaxLabelValue = 63
)

// ApplicationKey says why metadata meta is a Dubbo 3 application instance's: the first of
// Dubbo's own keys it holds (EndpointsKey, RevisionKey), "" when it holds neither.
func ApplicationKey(meta map[string]string) string {
	for _, k := range []string{EndpointsKey, RevisionKey} {
		if _, ok := meta[k]; ok {
			return k
		}
	}
	return ""
}

// notLabel reports metadata Dubbo writes that are no labels: the time the provider URL was made
// (it changes at every restart), and the MetadataService's version.
func notLabel(k string) bool { return k == "timestamp" || k == "meta-v" }

// Labels are the endpoint labels of a Dubbo 3 instance's metadata: Dubbo's bookkeeping
// ("dubbo." keys) left out, the revision as dubbo-revision, values over 63 characters left out,
// then at most 32 labels, the revision first and the others in key order. skip, when not nil,
// leaves out more keys (a registry's own bookkeeping). Keys and values are otherwise as
// registered: the core repairs them to Kubernetes label syntax (model.Labels). nil when none.
func Labels(meta map[string]string, skip func(key string) bool) map[string]string {
	out := map[string]string{}
	if v, ok := meta[RevisionKey]; ok && utf8.RuneCountInString(v) <= MaxLabelValue {
		out[RevisionLabel] = v
	}
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		if len(out) == MaxLabels {
			break
		}
		v := meta[k]
		if strings.HasPrefix(k, bookkeeping) || notLabel(k) || utf8.RuneCountInString(v) > MaxLabelValue || skip != nil && skip(k) {
			continue
		}
		if _, taken := out[k]; !taken {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// ProviderLabelKeys are the parameters of a Dubbo 2 provider URL copied to endpoint labels, in
// the order ProviderLabels reads them. A new slice each call.
func ProviderLabelKeys() []string {
	return []string{"application", "group", "version", "dubbo", "release", "side"}
}

// ProviderLabels are the endpoint labels of a Dubbo 2 provider URL whose parameters param
// returns ("" for one absent): the ProviderLabelKeys that are set, as registered (the core
// sanitises them). nil when none.
func ProviderLabels(param func(key string) string) map[string]string {
	var out map[string]string
	for _, k := range ProviderLabelKeys() {
		if v := param(k); v != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = strings.Clone(v)
		}
	}
	return out
}

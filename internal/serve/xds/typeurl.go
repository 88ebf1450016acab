package xds

import (
	"strings"

	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// istiod asks for config by `group/version/Kind`. ServiceEntry moved from
// v1alpha3 to v1 in istiod 1.24, and the match is exact: serve every alias,
// and echo the one requested.
var kindByTypeURL = map[string]snapshot.Kind{
	"networking.istio.io/v1alpha3/ServiceEntry":  snapshot.ServiceEntry,
	"networking.istio.io/v1beta1/ServiceEntry":   snapshot.ServiceEntry,
	"networking.istio.io/v1/ServiceEntry":        snapshot.ServiceEntry,
	"networking.istio.io/v1alpha3/WorkloadEntry": snapshot.WorkloadEntry,
	"networking.istio.io/v1beta1/WorkloadEntry":  snapshot.WorkloadEntry,
	"networking.istio.io/v1/WorkloadEntry":       snapshot.WorkloadEntry,
}

// KindOf returns the kind a type URL asks for; ok is false for a type this
// server holds nothing of, which is answered with an empty response.
func KindOf(typeURL string) (kind snapshot.Kind, ok bool) {
	kind, ok = kindByTypeURL[typeURL]
	return kind, ok
}

// TypeURLs returns the type URLs a kind is served under, newest first.
func TypeURLs(kind snapshot.Kind) []string {
	return []string{
		"networking.istio.io/v1/" + kind.String(),
		"networking.istio.io/v1beta1/" + kind.String(),
		"networking.istio.io/v1alpha3/" + kind.String(),
	}
}

// maxTypeURLLen bounds what a client may name; anything longer is garbage.
const maxTypeURLLen = 256

func validTypeURL(t string) bool {
	return t != "" && len(t) <= maxTypeURLLen && !strings.ContainsAny(t, " \t\n\x00")
}

// typeLabel bounds the label values a client can create: the type URLs of
// the kinds this server holds are counted by name, every other type (istiod's
// empty answers, and anything a client makes up) together as "other".
func typeLabel(typeURL string) string {
	if _, ok := kindByTypeURL[typeURL]; ok {
		return typeURL
	}
	return "other"
}

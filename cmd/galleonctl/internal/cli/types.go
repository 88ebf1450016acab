package cli

import (
	"fmt"
	"strings"

	"github.com/galleon-mesh/galleon/internal/xdsclient"
)

// typeURLs turns --type and --api-version into the type URLs to
// subscribe to. istiod asks for "group/version/Kind" and matches exactly,
// which is why the API version matters: 1.24+ asks for v1, older for
// v1alpha3.
func typeURLs(types, apiVersion string) ([]string, error) {
	switch apiVersion {
	case "v1", "v1beta1", "v1alpha3":
	default:
		return nil, fmt.Errorf("--api-version %q: use v1 (istiod >= 1.24), v1beta1 or v1alpha3 (istiod <= 1.23)", apiVersion)
	}
	var out []string
	seen := map[string]bool{}
	for _, t := range strings.Split(types, ",") {
		t = strings.TrimSpace(t)
		var url string
		switch strings.ToLower(t) {
		case "serviceentries", "serviceentry", "se":
			url = "networking.istio.io/" + apiVersion + "/ServiceEntry"
		case "workloadentries", "workloadentry", "we":
			url = "networking.istio.io/" + apiVersion + "/WorkloadEntry"
		case "":
			return nil, fmt.Errorf("--type %q: empty type", types)
		default:
			if !strings.Contains(t, "/") {
				return nil, fmt.Errorf("--type %q: use serviceentries, workloadentries, or a full type URL such as networking.istio.io/v1/ServiceEntry", t)
			}
			url = t // a full type URL, sent as given
		}
		if !seen[url] {
			seen[url] = true
			out = append(out, url)
		}
	}
	return out, nil
}

// legacyCollections turns --type into legacy MCP collection names, the
// lowercase paths Istio 1.1 - 1.8 sinks ask for. A type with a "/" is a
// collection name, sent as given.
func legacyCollections(types string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, t := range strings.Split(types, ",") {
		t = strings.TrimSpace(t)
		var c string
		switch strings.ToLower(t) {
		case "serviceentries", "serviceentry", "se":
			c = xdsclient.LegacyServiceEntries
		case "workloadentries", "workloadentry", "we":
			c = xdsclient.LegacyWorkloadEntries
		case "":
			return nil, fmt.Errorf("--type %q: empty type", types)
		default:
			if !strings.Contains(t, "/") {
				return nil, fmt.Errorf("--type %q: use serviceentries, workloadentries, or a legacy MCP collection such as istio/networking/v1alpha3/destinationrules", t)
			}
			c = t
		}
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out, nil
}

// isLegacyCollection tells a legacy MCP collection ("istio/networking/v1alpha3/serviceentries")
// from a type URL ("networking.istio.io/v1/ServiceEntry").
func isLegacyCollection(s string) bool {
	return strings.Count(s, "/") == 3 && s == strings.ToLower(s)
}

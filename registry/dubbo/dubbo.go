// Package dubbo is what Galleon's adapters agree on about Apache Dubbo services, whichever
// registry holds them: the service name of an interface or an application (ServiceName), the
// protocols of Dubbo's protocol names and their ports (Protocols), the ports a Dubbo 3 instance
// lists in its metadata "dubbo.endpoints" (Protocols.Endpoints), and the endpoint labels of a
// provider URL's parameters and of a Dubbo 3 instance's metadata (ProviderLabels, Labels).
//
// galleon-zookeeper (Dubbo 2 and Dubbo 3 layouts) and galleon-nacos (Dubbo on Nacos) both map
// through it, so that a Dubbo estate moving from one registry to the other keeps its
// ServiceEntry names, hosts and ports; an adapter for Dubbo on another registry uses it for the
// same reason. Everything here is a pure function of its arguments.
package dubbo

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/galleon-mesh/galleon/model"
)

// ServiceName is the service name of (interface, group, version): a DNS-1123 label, unique per
// triple. A Dubbo 3 application is ServiceName(application, "", "").
//
//   - An interface that is already a DNS label without "--", with no group and no version, is
//     its own name ("orders").
//   - Anything else is a readable prefix (the interface, group and version sanitised, joined by
//     '-', '-' runs collapsed, shortened to fit) then "--" then the first 10 hex digits of the
//     SHA-256 of interface, group and version separated by NUL bytes:
//     "org-apache-demo-demoservice-g1-1-0-0--b805551c2d".
//
// Names of the first kind never contain "--", names of the second always do, so the two cannot
// be equal; two of the first kind are equal only for the same interface; two of the second
// only if 40 bits of SHA-256 collide (and the core reports a name collision rather than
// overwriting). Lower-casing and '.' to '-' are lossy (DemoService and demoservice, a.b-c and
// a-b.c), which is why the hash is there; Dubbo's own "providers:iface:version:group" is not a
// DNS name at all.
//
// The name never changes for a given triple: it is what ServiceEntries are named by, in every
// registry, and changing it would move every Dubbo service of every user.
func ServiceName(iface, group, version string) string {
	if iface != "" && group == "" && version == "" && model.DNSLabel(iface) == iface && !strings.Contains(iface, "--") {
		return iface
	}
	sum := sha256.Sum256([]byte(iface + "\x00" + group + "\x00" + version))
	suffix := "--" + hex.EncodeToString(sum[:])[:10]
	tail := ""
	for _, s := range []string{group, version} {
		if l := collapse(model.DNSLabel(strings.ToLower(s))); l != "" {
			tail += "-" + l
		}
	}
	head := collapse(model.DNSLabel(strings.ToLower(iface)))
	budget := model.MaxDNSLabel - len(suffix)
	if len(tail) > budget/2 {
		tail = strings.TrimRight(tail[:budget/2], "-")
	}
	// Keep the end of a long interface name: the class name tells services apart.
	if room := budget - len(tail); len(head) > room {
		head = strings.TrimLeft(head[len(head)-room:], "-")
	}
	prefix := strings.Trim(collapse(head+tail), "-")
	if prefix == "" {
		prefix = "dubbo"
	}
	return prefix + suffix
}

// collapse replaces runs of '-' by one.
func collapse(s string) string {
	for strings.Contains(s, "--") {
		s = strings.ReplaceAll(s, "--", "-")
	}
	return s
}

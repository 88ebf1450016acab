package eureka

import (
	"github.com/galleon-mesh/galleon/adapters/eureka/internal/wire"
	"github.com/galleon-mesh/galleon/registry"
)

// Reasons a record is not served, the tag registry.Reason gives its error (the core counts
// rejections by it, galleon_registry_records_rejected_total). The decoder's own (id, address,
// port, status, action, other) are wire's, in Skipped.Reason.

// bad gives err the reason it is counted under (registry.Reason).
func bad(reason string, err error) error { return registry.Reason(reason, err) }

// reasonOf is the reason err was given, or other.
func reasonOf(err error) string { return registry.ReasonOf(err, wire.ReasonOther) }

// Reasons found by the mapping rather than the decoder.
const (
	// reasonProtocol: the protocol metadata (Config.ProtocolKey) names no Istio protocol.
	reasonProtocol = "protocol"
	// reasonName: an application whose name leaves nothing after DNS-1123 sanitising, or
	// whose sanitised name is another application's (the smaller name keeps it).
	reasonName = "name"
)

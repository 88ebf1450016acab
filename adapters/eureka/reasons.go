package eureka

import "github.com/galleon-mesh/galleon/registry"

// Reasons an instance is skipped (Skipped.Reason; the adapter's metric label, like the ZooKeeper
// adapter's galleon_zookeeper_records_rejected_total).
const (
	// reasonID: neither instanceId nor the fallbacks Netflix's InstanceInfo.getId uses (an
	// Amazon instance-id, the hostName), or no application name: the instance cannot be told
	// apart from the others, so a delta could never replace or remove it.
	reasonID = "id"
	// reasonAddress: no ipAddr and no hostName, or one that is not an IP address / host name.
	reasonAddress = "address"
	// reasonPort: no enabled port, an enabled port out of 1-65535, or a number or @enabled
	// flag that does not parse.
	reasonPort = "port"
	// reasonStatus: a status that is none of Eureka's five (UP, DOWN, STARTING,
	// OUT_OF_SERVICE, UNKNOWN), or none at all.
	reasonStatus = "status"
	// reasonAction: a delta entry whose actionType is none of ADDED, MODIFIED, DELETED (set by
	// ApplyDelta, not by the decoder: a full listing's actionType means nothing).
	reasonAction = "action"
	// reasonOther: anything else, e.g. an instance or application that is not a JSON object.
	reasonOther = "other"
)

// bad gives err the reason it is counted under (registry.Reason).
func bad(reason string, err error) error { return registry.Reason(reason, err) }

// reasonOf is the reason err was given, or other.
func reasonOf(err error) string { return registry.ReasonOf(err, reasonOther) }

// Reasons found by the mapping rather than the decoder.
const (
	// reasonProtocol: the protocol metadata (Config.ProtocolKey) names no Istio protocol.
	reasonProtocol = "protocol"
	// reasonName: an application whose name leaves nothing after DNS-1123 sanitising, or
	// whose sanitised name is another application's (the smaller name keeps it).
	reasonName = "name"
	// reasonDocument: a listing that is no listing at all (malformed, or over --eureka-max-body):
	// nothing of it is applied, and the server that sent it counts as failing.
	reasonDocument = "document"
)

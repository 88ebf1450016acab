package wire

import "github.com/galleon-mesh/galleon/registry"

// Reasons an instance is skipped (Skipped.Reason): the tag registry.Reason gives its error, by
// which the core counts it.
const (
	// ReasonID: neither instanceId nor the fallbacks Netflix's InstanceInfo.getId uses (an
	// Amazon instance-id, the hostName), or no application name: the instance cannot be told
	// apart from the others, so a delta could never replace or remove it.
	ReasonID = "id"
	// ReasonAddress: no ipAddr and no hostName, or one that is not an IP address / host name.
	ReasonAddress = "address"
	// ReasonPort: no enabled port, an enabled port out of 1-65535, or a number or @enabled
	// flag that does not parse.
	ReasonPort = "port"
	// ReasonStatus: a status that is none of Eureka's five (UP, DOWN, STARTING,
	// OUT_OF_SERVICE, UNKNOWN), or none at all.
	ReasonStatus = "status"
	// ReasonAction: a delta entry whose actionType is none of ADDED, MODIFIED, DELETED (set by
	// ApplyDelta, not by the decoder: a full listing's actionType means nothing).
	ReasonAction = "action"
	// ReasonOther: anything else, e.g. an instance or application that is not a JSON object.
	ReasonOther = "other"
)

// bad gives err the reason it is counted under (registry.Reason).
func bad(reason string, err error) error { return registry.Reason(reason, err) }

// reasonOf is the reason err was given, or other.
func reasonOf(err error) string { return registry.ReasonOf(err, ReasonOther) }

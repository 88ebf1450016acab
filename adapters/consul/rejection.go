package consul

import (
	"fmt"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// rejectReason is the reason label of the core's
// galleon_registry_records_rejected_total: which part of a record is
// malformed. Dashboards select on these values, so the set stays as it is.
type rejectReason string

const (
	reasonAddress rejectReason = "address"
	reasonPort    rejectReason = "port"
	reasonName    rejectReason = "name"
	reasonOther   rejectReason = "other"
)

// malformed returns err marked with the reason it rejects a record for
// (registry.Reason, read by the core's
// galleon_registry_records_rejected_total{reason}). The mapping says the
// reason where it finds the fault, so that the label does not depend on the
// wording of the message, nor on the names it quotes.
func malformed(reason rejectReason, err error) error {
	return registry.Reason(string(reason), err)
}

// malformedf is malformed(reason, fmt.Errorf(format, args...)).
func malformedf(reason rejectReason, format string, args ...any) error {
	return malformed(reason, fmt.Errorf(format, args...))
}

// errNameTaken rejects a Consul service whose name sanitises to the key of
// one with a smaller name (see watch.service).
func errNameTaken(key model.ServiceKey, winner string) error {
	return malformedf(reasonName, "its ServiceEntry %s is taken by consul service %q (names sanitise to the same)", key, winner)
}

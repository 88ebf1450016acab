package registry

import "errors"

// Reason gives a rejection's error the reason it is counted under: the reason label of
// galleon_registry_records_rejected_total. Give it where the fault is found, so the label does
// not depend on a message's wording or the names it quotes:
//
//	sink.Rejected(record, registry.Reason("port", fmt.Errorf("port %d out of range", p)))
//
// A reason is a short snake_case word ("port", "address", "name"; at most 32 bytes). The core
// keeps at most 32 distinct reasons per process; an error without one, a reason that is not
// such a word, or one beyond that bound counts as "other". Wrapping keeps the reason:
// fmt.Errorf("node %s: %w", path, err) is counted under err's.
func Reason(reason string, err error) error { return &reasonError{reason: reason, err: err} }

// ReasonOf returns the reason err was given with Reason (the outermost, when wrapped more than
// once), or fallback when it was given none.
func ReasonOf(err error, fallback string) string {
	if re, ok := errors.AsType[*reasonError](err); ok {
		return re.reason
	}
	return fallback
}

// reasonError is an error and the reason it is counted under; it reads as the error it wraps.
type reasonError struct {
	reason string
	err    error
}

func (e *reasonError) Error() string { return e.err.Error() }
func (e *reasonError) Unwrap() error { return e.err }

// Package rejection tags the error of a malformed registry record with the reason an adapter
// counts it under (the label of its records-rejected metric), so that the parser that finds the
// fault names the reason and the code that reports it does not have to guess from the message.
package rejection

import "errors"

// Error is a record's rejection and the reason it is counted under.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// With gives err the reason it is counted under.
func With(reason string, err error) error { return &Error{Reason: reason, Err: err} }

// Of is the reason err was given, or fallback when it was given none.
func Of(err error, fallback string) string {
	if re, ok := errors.AsType[*Error](err); ok {
		return re.Reason
	}
	return fallback
}

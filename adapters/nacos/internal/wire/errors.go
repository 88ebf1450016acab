package wire

import (
	"errors"
	"fmt"
)

// maxErrorMessage bounds the part of a server's message that an error carries: the server
// controls it, and errors end up in logs and in /debug/status.
const maxErrorMessage = 256

// ServerError is an answer of the server that says the request failed: a Nacos 2 response with
// success false (resultCode 500, an errorCode and a message), or a Nacos 1 HTTP status other
// than 200 with its body's first bytes. The server was reachable; retrying elsewhere does not
// help, retrying later may.
type ServerError struct {
	// Code is the Nacos errorCode of a gRPC response, or the HTTP status of an HTTP answer.
	Code int
	// Message is the server's message, cut to a bound and stripped of control characters.
	Message string
}

func (e *ServerError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("nacos: server answered error %d", e.Code)
	}
	return fmt.Sprintf("nacos: server answered error %d: %s", e.Code, e.Message)
}

// NewServerError returns a ServerError whose message is msg, bounded and made printable.
func NewServerError(code int, msg string) *ServerError {
	return &ServerError{Code: code, Message: Clip(msg, maxErrorMessage)}
}

// DecodeError says that one answer of the server could not be accepted: malformed, or beyond
// one of the decoder's limits. What names the part at fault or the limit hit; it never holds
// the body itself.
type DecodeError struct {
	// What is the message or field being decoded, e.g. "ServiceInfo", "Payload".
	What string
	// Reason says what was wrong, e.g. "more than 10000 instances" or "unexpected EOF".
	Reason string
	// Err is the underlying error, if any (a json.SyntaxError, io.ErrUnexpectedEOF, ...).
	Err error
}

func (e *DecodeError) Error() string {
	return "nacos: decoding " + e.What + ": " + e.Reason
}

func (e *DecodeError) Unwrap() error { return e.Err }

// decodeErr builds a DecodeError; reason is formatted by the caller's format and args.
func decodeErr(what string, err error, format string, args ...any) *DecodeError {
	return &DecodeError{What: what, Reason: Clip(fmt.Sprintf(format, args...), maxErrorMessage), Err: err}
}

// IsServerError reports whether err is, or wraps, a *ServerError.
func IsServerError(err error) bool {
	var se *ServerError
	return errors.As(err, &se)
}

// Clip returns s cut to at most n bytes (at a rune boundary) with every control character
// replaced by '?', so that a server-controlled string is safe to log.
func Clip(s string, n int) string {
	out := make([]rune, 0, min(len(s), n))
	size := 0
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			r = '?'
		}
		l := len(string(r))
		if size+l > n {
			return string(out) + "…"
		}
		size += l
		out = append(out, r)
	}
	return string(out)
}

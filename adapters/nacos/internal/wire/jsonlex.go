package wire

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// lexer reads one JSON document held in memory, value by value, for jsonDecoder. It replaces
// encoding/json's Decoder, whose Token and Decode, called once per scalar, made most of what a
// start allocated: each call scans past the value's end, and the ',' there makes the scanner
// build (and drop) a SyntaxError for "after top-level value" (241 MB of 895 MB allocated in a
// start of 10,000 services x 10; docs/benchmarks.md). It accepts exactly RFC 8259 JSON, and
// decodes strings as encoding/json does: escapes resolved, invalid UTF-8 and lone surrogates
// replaced by U+FFFD.
type lexer struct {
	data []byte
	pos  int
}

// maxDepth bounds the nesting of a value skipped (encoding/json's own bound).
const maxDepth = 10000

// syntaxError is a malformed document: what was wrong and at which byte.
type syntaxError struct {
	msg    string
	offset int
}

func (e *syntaxError) Error() string { return e.msg + " at byte " + strconv.Itoa(e.offset) }

// space skips white space.
func (l *lexer) space() {
	for l.pos < len(l.data) {
		switch l.data[l.pos] {
		case ' ', '\t', '\n', '\r':
			l.pos++
		default:
			return
		}
	}
}

// peek skips white space and returns the next byte; io.ErrUnexpectedEOF at the end.
func (l *lexer) peek() (byte, error) {
	l.space()
	if l.pos >= len(l.data) {
		return 0, io.ErrUnexpectedEOF
	}
	return l.data[l.pos], nil
}

// unexpected is the error for the byte at the position (or the end).
func (l *lexer) unexpected(context string) error {
	if l.pos >= len(l.data) {
		return io.ErrUnexpectedEOF
	}
	return &syntaxError{msg: fmt.Sprintf("invalid character %q %s", l.data[l.pos], context), offset: l.pos}
}

// expect consumes c, after white space.
func (l *lexer) expect(c byte, context string) error {
	if b, err := l.peek(); err != nil || b != c {
		return l.unexpected(context)
	}
	l.pos++
	return nil
}

// literal consumes the literal word (true, false, null) the next byte begins.
func (l *lexer) literal(word string) error {
	if len(l.data)-l.pos < len(word) || string(l.data[l.pos:l.pos+len(word)]) != word {
		for i := 0; i < len(word); i++ {
			if l.pos >= len(l.data) || l.data[l.pos] != word[i] {
				return l.unexpected("in literal " + word)
			}
			l.pos++
		}
	}
	l.pos += len(word)
	return nil
}

// number consumes a number and returns its text.
func (l *lexer) number() ([]byte, error) {
	start := l.pos
	if l.pos < len(l.data) && l.data[l.pos] == '-' {
		l.pos++
	}
	switch {
	case l.pos < len(l.data) && l.data[l.pos] == '0':
		l.pos++
	case l.digits() == 0:
		return nil, l.unexpected("in numeric literal")
	}
	if l.pos < len(l.data) && l.data[l.pos] == '.' {
		l.pos++
		if l.digits() == 0 {
			return nil, l.unexpected("after decimal point in numeric literal")
		}
	}
	if l.pos < len(l.data) && (l.data[l.pos] == 'e' || l.data[l.pos] == 'E') {
		l.pos++
		if l.pos < len(l.data) && (l.data[l.pos] == '+' || l.data[l.pos] == '-') {
			l.pos++
		}
		if l.digits() == 0 {
			return nil, l.unexpected("in exponent of numeric literal")
		}
	}
	return l.data[start:l.pos], nil
}

func (l *lexer) digits() int {
	n := 0
	for l.pos < len(l.data) && l.data[l.pos] >= '0' && l.data[l.pos] <= '9' {
		l.pos++
		n++
	}
	return n
}

// str consumes a string (the next byte is its '"') and returns it decoded. A string of plain
// ASCII without escapes, nearly every one a server sends, costs one allocation.
func (l *lexer) str() (string, error) {
	l.pos++ // '"'
	start := l.pos
	for l.pos < len(l.data) {
		c := l.data[l.pos]
		switch {
		case c == '"':
			s := string(l.data[start:l.pos])
			l.pos++
			return s, nil
		case c == '\\' || c >= utf8.RuneSelf:
			return l.strSlow(start)
		case c < ' ':
			return "", l.unexpected("in string literal")
		}
		l.pos++
	}
	return "", io.ErrUnexpectedEOF
}

// key is str for an object key: a field name of the Nacos protocol, the most common key by
// far, is returned without an allocation.
func (l *lexer) key() (string, error) {
	start := l.pos + 1
	for i := start; i < len(l.data); i++ {
		c := l.data[i]
		if c == '"' {
			if k := fieldName(l.data[start:i]); k != "" {
				l.pos = i + 1
				return k, nil
			}
			break
		}
		if c == '\\' || c < ' ' || c >= utf8.RuneSelf {
			break
		}
	}
	return l.str()
}

// fieldName is b if it is a field name of the answers decoded here, as a constant; "" if not.
// (A switch on string(b) compares without converting.)
func fieldName(b []byte) string {
	switch string(b) {
	case "instanceId":
		return "instanceId"
	case "ip":
		return "ip"
	case "port":
		return "port"
	case "weight":
		return "weight"
	case "healthy":
		return "healthy"
	case "enabled":
		return "enabled"
	case "ephemeral":
		return "ephemeral"
	case "clusterName":
		return "clusterName"
	case "serviceName":
		return "serviceName"
	case "metadata":
		return "metadata"
	case "instanceHeartBeatInterval":
		return "instanceHeartBeatInterval"
	case "instanceHeartBeatTimeOut":
		return "instanceHeartBeatTimeOut"
	case "ipDeleteTimeout":
		return "ipDeleteTimeout"
	case "instanceIdGenerator":
		return "instanceIdGenerator"
	case "name":
		return "name"
	case "groupName":
		return "groupName"
	case "clusters":
		return "clusters"
	case "cacheMillis":
		return "cacheMillis"
	case "hosts":
		return "hosts"
	case "lastRefTime":
		return "lastRefTime"
	case "checksum":
		return "checksum"
	case "allIPs":
		return "allIPs"
	case "reachProtectionThreshold":
		return "reachProtectionThreshold"
	case "valid":
		return "valid"
	case "resultCode":
		return "resultCode"
	case "errorCode":
		return "errorCode"
	case "message":
		return "message"
	case "requestId":
		return "requestId"
	case "success":
		return "success"
	case "serviceInfo":
		return "serviceInfo"
	case "namespace":
		return "namespace"
	}
	return ""
}

// strSlow decodes the rest of a string whose plain part began at start.
func (l *lexer) strSlow(start int) (string, error) {
	b := make([]byte, 0, l.pos-start+16)
	b = append(b, l.data[start:l.pos]...)
	for l.pos < len(l.data) {
		c := l.data[l.pos]
		switch {
		case c == '"':
			l.pos++
			return string(b), nil
		case c == '\\':
			var err error
			if b, err = l.escape(b); err != nil {
				return "", err
			}
		case c < ' ':
			return "", l.unexpected("in string literal")
		case c < utf8.RuneSelf:
			b = append(b, c)
			l.pos++
		default:
			r, size := utf8.DecodeRune(l.data[l.pos:])
			b = utf8.AppendRune(b, r) // utf8.RuneError for an invalid byte, as encoding/json
			l.pos += size
		}
	}
	return "", io.ErrUnexpectedEOF
}

// escape appends the escape sequence at the position ('\\') to b.
func (l *lexer) escape(b []byte) ([]byte, error) {
	if l.pos+1 >= len(l.data) {
		return nil, io.ErrUnexpectedEOF
	}
	l.pos++
	c := l.data[l.pos]
	if e := unescaped(c); e != 0 {
		l.pos++
		return append(b, e), nil
	}
	if c == 'u' {
		r, err := l.hex4()
		if err != nil {
			return nil, err
		}
		if utf16.IsSurrogate(r) {
			r = l.pair(r)
		}
		return utf8.AppendRune(b, r), nil
	}
	return nil, l.unexpected("in string escape code")
}

// unescaped is the byte the one-letter escape "\c" stands for, 0 if c makes no such escape.
func unescaped(c byte) byte {
	switch c {
	case '"', '\\', '/':
		return c
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return 0
}

// pair is the rune the surrogate r makes with a "\uXXXX" escape that follows it (consumed), or
// U+FFFD for a lone surrogate (nothing consumed), as encoding/json decodes them.
func (l *lexer) pair(r rune) rune {
	save := l.pos
	if l.pos+1 < len(l.data) && l.data[l.pos] == '\\' && l.data[l.pos+1] == 'u' {
		l.pos++
		if r2, err := l.hex4(); err == nil {
			if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
				return dec
			}
		}
	}
	l.pos = save
	return utf8.RuneError
}

// hex4 reads the four hex digits after "\u" (the position is the 'u').
func (l *lexer) hex4() (rune, error) {
	if len(l.data)-l.pos < 5 {
		return 0, io.ErrUnexpectedEOF
	}
	var r rune
	for i := 1; i <= 4; i++ {
		c := l.data[l.pos+i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			l.pos += i
			return 0, l.unexpected("in \\u hexadecimal character escape")
		}
		r = r<<4 | rune(c)
	}
	l.pos += 5
	return r, nil
}

// skip consumes one value of any kind, checking its syntax.
func (l *lexer) skip(depth int) error {
	c, err := l.peek()
	if err != nil {
		return err
	}
	switch {
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return &syntaxError{msg: "exceeded max depth", offset: l.pos}
		}
		return l.skipContainer(c, depth)
	case c == '"':
		return l.skipString()
	case c == 't':
		return l.literal("true")
	case c == 'f':
		return l.literal("false")
	case c == 'n':
		return l.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		_, err := l.number()
		return err
	}
	return l.unexpected("looking for beginning of value")
}

// skipContainer consumes the object or array whose opening byte, open, is next.
func (l *lexer) skipContainer(open byte, depth int) error {
	l.pos++
	end := byte(']')
	if open == '{' {
		end = '}'
	}
	if c, err := l.peek(); err != nil {
		return err
	} else if c == end {
		l.pos++
		return nil
	}
	for {
		if open == '{' {
			if c, err := l.peek(); err != nil {
				return err
			} else if c != '"' {
				return l.unexpected("looking for beginning of object key string")
			}
			if err := l.skipString(); err != nil {
				return err
			}
			if err := l.expect(':', "after object key"); err != nil {
				return err
			}
		}
		if err := l.skip(depth + 1); err != nil {
			return err
		}
		c, err := l.peek()
		if err != nil {
			return err
		}
		l.pos++
		switch c {
		case ',':
		case end:
			return nil
		default:
			l.pos--
			if open == '{' {
				return l.unexpected("after object key:value pair")
			}
			return l.unexpected("after array element")
		}
	}
}

// skipString consumes a string (the next byte is its '"') without decoding it.
func (l *lexer) skipString() error {
	l.pos++
	for l.pos < len(l.data) {
		c := l.data[l.pos]
		switch {
		case c == '"':
			l.pos++
			return nil
		case c == '\\':
			if _, err := l.escape(nil); err != nil {
				return err
			}
			continue
		case c < ' ':
			return l.unexpected("in string literal")
		}
		l.pos++
	}
	return io.ErrUnexpectedEOF
}

// kindAt names the kind of value c begins, for errors: "'{'", "'['", "null", "a boolean", "a
// string" or "a number".
func kindAt(c byte) string {
	switch t := typeOfValue(c); {
	case c == '{' || c == '[':
		return "'" + string(c) + "'"
	case c == 'n':
		return "null"
	case t == "bool":
		return "a boolean"
	default:
		return "a " + t
	}
}

// typeOfValue names the kind of value c begins as encoding/json's UnmarshalTypeError does.
func typeOfValue(c byte) string {
	switch {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "bool"
	}
	return "number"
}

// scalar decodes the next value into v: a *string, *bool, *int, *int64, *float64 or
// *json.RawMessage (which gets the value's text, null included); null leaves any other v as
// it is. A value of another kind is an error saying what was wanted.
func (l *lexer) scalar(v any) (wrongType string, err error) {
	c, err := l.peek()
	if err != nil {
		return "", err
	}
	if raw, ok := v.(*json.RawMessage); ok {
		start := l.pos
		if err := l.skip(0); err != nil {
			return "", err
		}
		*raw = append((*raw)[:0], l.data[start:l.pos]...)
		return "", nil
	}
	if c == 'n' {
		return "", l.literal("null")
	}
	switch v := v.(type) {
	case *string:
		if c != '"' {
			return l.mismatch("string", c)
		}
		*v, err = l.str()
		return "", err
	case *bool:
		if c != 't' && c != 'f' {
			return l.mismatch("bool", c)
		}
		*v = c == 't'
		if *v {
			return "", l.literal("true")
		}
		return "", l.literal("false")
	case *int, *int64, *float64:
		return l.numberInto(v, c)
	}
	return "", fmt.Errorf("wire: scalar of %T", v)
}

// numberInto decodes the next value, which begins with c, into v, a *int, *int64 or *float64.
func (l *lexer) numberInto(v any, c byte) (string, error) {
	want := "int"
	switch v.(type) {
	case *float64:
		want = "float64"
	case *int64:
		want = "int64"
	}
	if c != '-' && (c < '0' || c > '9') {
		return l.mismatch(want, c)
	}
	text, err := l.number()
	if err != nil {
		return "", err
	}
	switch v := v.(type) {
	case *float64:
		f, err := strconv.ParseFloat(string(text), 64)
		if err != nil {
			return want + ", got number " + string(text), nil
		}
		*v = f
	case *int64:
		n, err := strconv.ParseInt(string(text), 10, 64)
		if err != nil {
			return want + ", got number " + string(text), nil
		}
		*v = n
	case *int:
		n, err := strconv.ParseInt(string(text), 10, strconv.IntSize)
		if err != nil {
			return want + ", got number " + string(text), nil
		}
		*v = int(n)
	}
	return "", nil
}

// mismatch skips the value of the wrong kind and says what was wanted.
func (l *lexer) mismatch(want string, c byte) (string, error) {
	if err := l.skip(0); err != nil {
		return "", err
	}
	return want + ", got " + typeOfValue(c), nil
}

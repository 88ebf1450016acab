package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// The JSON listings: Netflix's Jackson codec (the server's default), its older XStream codec,
// and Polaris's; see scalar for how their values differ.

// decodeJSON reads {"applications": {"versions__delta": "1", "apps__hashcode": "UP_2_",
// "application": [{"name": "APP", "instance": [{...}]}]}} (the key names are Netflix's
// versions_delta and apps_hashcode with '_' doubled, XStream's escaping, which its Jackson codec
// kept). It walks the outer levels token by token and decodes each instance in one go, so that
// a large listing is scanned about twice, not once per level (json.Unmarshal with a custom
// unmarshaler per level scans each level's bytes again), and so that an application or instance
// that is not an object is skipped rather than failing the listing.
//
// Netflix's older XStream JSON codec (Jettison) writes one application or one instance as an
// object instead of an array of one; its Jackson readers accept both, and so does this.
func decodeJSON(body io.Reader, lim Limits) (*Applications, error) {
	dec := json.NewDecoder(body)
	fail := func(err error) (*Applications, error) { return nil, fmt.Errorf("eureka: JSON listing: %w", err) }
	t, err := dec.Token()
	if err != nil {
		return fail(err)
	}
	if t != json.Delim('{') {
		return fail(fmt.Errorf("the document is a JSON %s, not an object", kindOf(t)))
	}
	var as *assembler
	for dec.More() {
		key, err := nextKey(dec)
		if err != nil {
			return fail(err)
		}
		if key != "applications" {
			if err := skipValue(dec); err != nil {
				return fail(err)
			}
			continue
		}
		t, err := dec.Token()
		if err != nil {
			return fail(err)
		}
		if t == nil {
			continue // null: as if absent
		}
		if t != json.Delim('{') {
			return fail(fmt.Errorf("applications is a JSON %s, not an object", kindOf(t)))
		}
		as = newAssembler(lim)
		if err := decodeJSONApplications(dec, as); err != nil {
			return fail(err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return fail(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if _, over := errors.AsType[*LimitError](err); over {
			return fail(err)
		}
		return fail(errors.New("data after the listing"))
	}
	if as == nil {
		return nil, errors.New(`eureka: JSON listing has no "applications" object`)
	}
	return as.finish(), nil
}

// decodeJSONApplications reads the members of "applications" (its '{' read).
func decodeJSONApplications(dec *json.Decoder, as *assembler) error {
	var scratch []rawInstance // one application's instances, reused
	for dec.More() {
		key, err := nextKey(dec)
		if err != nil {
			return err
		}
		switch key {
		case "versions__delta":
			var v scalar
			err = dec.Decode(&v)
			as.versionsDelta(v)
		case "apps__hashcode":
			var v scalar
			err = dec.Decode(&v)
			as.appsHashcode(v)
		case "application":
			err = eachElement(dec, false, func(t json.Token) error {
				if err := as.countApp(); err != nil {
					return err
				}
				if t != json.Delim('{') {
					as.notObject()
					return skipRest(dec, t)
				}
				var name scalar
				var err error
				name, scratch, err = decodeJSONApplication(dec, as, scratch[:0])
				if err == nil {
					as.add(name.text(), scratch) // the instances listed before the name, if any
				}
				clear(scratch) // let the instances' maps go
				return err
			})
		default:
			err = skipValue(dec)
		}
		if err != nil {
			return err
		}
	}
	_, err := dec.Token()
	return err
}

// decodeJSONApplication reads one application (its '{' read): its name, and its instances.
// Those listed after the name (Netflix's and Polaris's order) are added to as one by one as
// they are decoded, so that only the decoded instance is held, not its raw form; those listed
// before it are appended to raws, for the caller to add once the name is known.
func decodeJSONApplication(dec *json.Decoder, as *assembler, raws []rawInstance) (scalar, []rawInstance, error) {
	var name scalar
	named, added := false, false
	for dec.More() {
		key, err := nextKey(dec)
		if err != nil {
			return name, raws, err
		}
		switch {
		case key == "name" && !added:
			err = dec.Decode(&name)
			named = true
		case key == "instance":
			err = eachElement(dec, true, func(t json.Token) error {
				if err := as.countInstance(); err != nil {
					return err
				}
				in, err := decodeJSONInstance(dec, t)
				if err != nil {
					return err
				}
				if named {
					as.addOne(name.text(), &in)
					added = true
				} else {
					raws = append(raws, in)
				}
				return nil
			})
		default:
			err = skipValue(dec)
		}
		if err != nil {
			return name, raws, err
		}
	}
	_, err := dec.Token()
	return name, raws, err
}

// eachElement reads a value that is an array of elements, one element, or null, and calls f
// for each element with its first token read (f must read the rest: skipRest), or, if whole
// and the element is in an array, with nil and nothing read (f reads the element whole).
func eachElement(dec *json.Decoder, whole bool, f func(first json.Token) error) error {
	t, err := dec.Token()
	if err != nil || t == nil {
		return err
	}
	if t != json.Delim('[') {
		return f(t)
	}
	for dec.More() {
		var first json.Token
		if !whole {
			if first, err = dec.Token(); err != nil {
				return err
			}
		}
		if err := f(first); err != nil {
			return err
		}
	}
	_, err = dec.Token() // ']'
	return err
}

// decodeJSONInstance reads one instance: the next value when first is nil, else the value
// whose first token was first (a single instance written as an object, or not an object).
func decodeJSONInstance(dec *json.Decoder, first json.Token) (rawInstance, error) {
	var r rawInstance
	switch first {
	case nil:
		// The usual case: an element of an array, decoded in one go. Every field of
		// rawInstance takes any JSON value, so a type error is the instance's own.
		err := dec.Decode(&r)
		if _, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			return rawInstance{notObject: true}, nil
		}
		return r, err
	case json.Delim('{'):
		// One instance written as an object (XStream JSON), its '{' already read: gather its
		// members into an object again and decode that. Rare, and small.
		var buf bytes.Buffer
		buf.WriteByte('{')
		for dec.More() {
			key, err := nextKey(dec)
			if err != nil {
				return r, err
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return r, err
			}
			if buf.Len() > 1 {
				buf.WriteByte(',')
			}
			k, _ := json.Marshal(key)
			buf.Write(k)
			buf.WriteByte(':')
			buf.Write(v)
		}
		if _, err := dec.Token(); err != nil {
			return r, err
		}
		buf.WriteByte('}')
		return r, json.Unmarshal(buf.Bytes(), &r)
	}
	return rawInstance{notObject: true}, skipRest(dec, first)
}

func nextKey(dec *json.Decoder) (string, error) {
	t, err := dec.Token()
	if err != nil {
		return "", err
	}
	key, ok := t.(string)
	if !ok {
		return "", fmt.Errorf("unexpected %v", t)
	}
	return key, nil
}

// skipValue reads the next value and drops it.
func skipValue(dec *json.Decoder) error {
	var v struct{}
	err := dec.Decode(&v)
	if _, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		return nil // not an object: read all the same
	}
	return err
}

// skipRest reads the rest of a value whose first token t was read: nothing for a scalar, up to
// the matching close for an array or object.
func skipRest(dec *json.Decoder, t json.Token) error {
	if t != json.Delim('[') && t != json.Delim('{') {
		return nil
	}
	for depth := 1; depth > 0; {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('['), json.Delim('{'):
			depth++
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
	}
	return nil
}

// kindOf names the JSON type of a token, for errors.
func kindOf(t json.Token) string {
	switch t.(type) {
	case json.Delim:
		if t == json.Delim('[') {
			return "array"
		}
		return "object"
	case string:
		return "string"
	case float64, json.Number:
		return "number"
	case bool:
		return "boolean"
	}
	return "null"
}

func (v *scalar) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	*v = scalar{}
	switch {
	case len(b) == 0 || string(b) == "null":
	case b[0] == '"':
		// The decoder has checked the literal; one without escapes is its own text.
		if len(b) >= 2 && bytes.IndexByte(b, '\\') < 0 && utf8.Valid(b) {
			v.s, v.set = string(b[1:len(b)-1]), true
			return nil
		}
		if err := json.Unmarshal(b, &v.s); err != nil {
			return err
		}
		v.set = true
	case b[0] == '{' || b[0] == '[':
		v.bad = true
	default: // a number, true or false: the literal is the text Jackson's asText gives
		v.s, v.set = string(b), true
	}
	return nil
}

func (p *rawPort) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	*p = rawPort{}
	switch {
	case len(b) == 0 || string(b) == "null":
		return nil
	case b[0] == '{':
		var w struct {
			Number  scalar `json:"$"`
			Enabled scalar `json:"@enabled"`
		}
		if err := json.Unmarshal(b, &w); err != nil {
			return err
		}
		p.Number, p.Enabled, p.set = w.Number, w.Enabled, true
	case b[0] == '[':
		p.bad = true
	default: // a bare number: the port, enabled by default
		if err := p.Number.UnmarshalJSON(b); err != nil {
			return err
		}
		p.set = true
	}
	return nil
}

func (m *stringMap) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	*m = nil
	if len(b) == 0 || b[0] != '{' {
		return nil // null, or not a map: no metadata (Jackson's fieldNames() is empty too)
	}
	var raw map[string]scalar
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(stringMap, len(raw))
	for k, v := range raw {
		if k == classKey {
			continue
		}
		out[k] = v.s
	}
	if len(out) > 0 { // an empty map is nil, as from XML
		*m = out
	}
	return nil
}

func (d *rawDataCenter) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	*d = rawDataCenter{}
	if len(b) == 0 || b[0] != '{' {
		return nil
	}
	type plain rawDataCenter
	return json.Unmarshal(b, (*plain)(d))
}

func (l *rawLease) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	*l = rawLease{}
	if len(b) == 0 || b[0] != '{' {
		return nil
	}
	type plain rawLease
	return json.Unmarshal(b, (*plain)(l))
}

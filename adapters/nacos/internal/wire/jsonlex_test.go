package wire

import (
	"encoding/json"
	"math"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// lexerSeeds are documents the lexer must read as encoding/json does: escapes, surrogates
// (paired, lone, reversed), invalid UTF-8, control characters, numbers at the edges, nesting,
// and malformed ones.
var lexerSeeds = []string{
	`{"a":"b"}`, `"plain"`, `"tab\there"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00\ud83d"`,
	`"\ud83dx"`, `"\ud83d\u0041"`, "\"\xff\xfe\"", "\"a\x01b\"", `"\/\\\"\b\f\n\r\t"`, `"\x"`, `"\u12g4"`, `"\u12"`,
	`0`, `-0`, `01`, `1.`, `.5`, `1e`, `1e+`, `-`, `1.5e300`, `1e400`, `-9223372036854775808`, `9223372036854775808`,
	`true`, `tru`, `nul`, `null`, `[1,2,]`, `{"a":1,}`, `{"a" 1}`, `[[[[]]]]`, `{"a":{"b":[1,{"c":null}]}}`,
	`{} {}`, ` [ 1 , "x" , true , null ] `, `{"a":1`, `[`, ``, `   `, `{,}`, `[,1]`, `{"a":}`,
}

// FuzzLexerMatchesEncodingJSON: the lexer accepts exactly the documents encoding/json accepts,
// and decodes a string, a number and a boolean to what encoding/json gives.
func FuzzLexerMatchesEncodingJSON(f *testing.F) {
	for _, s := range lexerSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l := lexer{data: data}
		err := l.skip(0)
		if err == nil {
			if l.space(); l.pos < len(data) {
				err = &syntaxError{msg: "trailing data", offset: l.pos}
			}
		}
		if valid := json.Valid(data); valid != (err == nil) {
			t.Fatalf("%q: lexer says %v, encoding/json's Valid %v", data, err, valid)
		}
		if err != nil {
			return
		}
		c, _ := (&lexer{data: data}).peek()
		switch typeOfValue(c) {
		case "string":
			var want, got string
			if e := json.Unmarshal(data, &want); e != nil {
				t.Fatalf("%q: encoding/json: %v", data, e)
			}
			if _, e := (&lexer{data: data}).scalar(&got); e != nil || got != want {
				t.Fatalf("%q: lexer %q, %v; encoding/json %q", data, got, e, want)
			}
		case "number":
			var want, got float64
			jerr := json.Unmarshal(data, &want)
			wrong, e := (&lexer{data: data}).scalar(&got)
			if e != nil || (jerr == nil) != (wrong == "") || jerr == nil && got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
				t.Fatalf("%q: lexer %v (%q, %v); encoding/json %v (%v)", data, got, wrong, e, want, jerr)
			}
			var wantInt, gotInt int64
			jerr = json.Unmarshal(data, &wantInt)
			wrong, e = (&lexer{data: data}).scalar(&gotInt)
			if e != nil || (jerr == nil) != (wrong == "") || gotInt != wantInt {
				t.Fatalf("%q: lexer int64 %d (%q, %v); encoding/json %d (%v)", data, gotInt, wrong, e, wantInt, jerr)
			}
		case "bool":
			var want, got bool
			_ = json.Unmarshal(data, &want)
			if _, e := (&lexer{data: data}).scalar(&got); e != nil || got != want {
				t.Fatalf("%q: lexer %v, %v; encoding/json %v", data, got, e, want)
			}
		}
	})
}

// TestLexerScalarKinds: a value of the wrong kind is named as encoding/json's
// UnmarshalTypeError names it, and null leaves the target as it was.
func TestLexerScalarKinds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		v    any
		want string
	}{
		{`"80"`, new(int), "int, got string"},
		{`80.5`, new(int), "int, got number 80.5"},
		{`1e3`, new(int64), "int64, got number 1e3"},
		{`true`, new(string), "string, got bool"},
		{`[1]`, new(bool), "bool, got array"},
		{`{"a":1}`, new(float64), "float64, got object"},
		{`3`, new(string), "string, got number"},
	} {
		wrong, err := (&lexer{data: []byte(tc.in)}).scalar(tc.v)
		if err != nil || wrong != tc.want {
			t.Errorf("scalar(%s into %T) = %q, %v; want %q", tc.in, tc.v, wrong, err, tc.want)
		}
	}
	s := "kept"
	if wrong, err := (&lexer{data: []byte(`null`)}).scalar(&s); err != nil || wrong != "" || s != "kept" {
		t.Errorf("null into a string: %q, %q, %v; want it kept", s, wrong, err)
	}
	var raw json.RawMessage
	if _, err := (&lexer{data: []byte(` {"a": [1, "x"]} `)}).scalar(&raw); err != nil || string(raw) != `{"a": [1, "x"]}` {
		t.Errorf("raw = %s, %v", raw, err)
	}
}

// TestFieldNames: every field name fieldName knows is returned as itself (a case and its
// return typed apart would decode one field under another's name), and anything else as "".
func TestFieldNames(t *testing.T) {
	src, err := os.ReadFile("jsonlex.go")
	if err != nil {
		t.Fatal(err)
	}
	pairs := regexp.MustCompile(`case ("[^"]*"):\n\t\treturn ("[^"]*")`).FindAllSubmatch(src, -1)
	if len(pairs) < 20 {
		t.Fatalf("found %d field names in jsonlex.go, want the switch of fieldName", len(pairs))
	}
	for _, p := range pairs {
		name, _ := strconv.Unquote(string(p[1]))
		if string(p[1]) != string(p[2]) || fieldName([]byte(name)) != name {
			t.Errorf("case %s returns %s", p[1], p[2])
		}
		if k, err := (&lexer{data: []byte(`"` + name + `"`)}).key(); err != nil || k != name {
			t.Errorf("key(%q) = %q, %v", name, k, err)
		}
	}
	for _, s := range []string{"", "IP", "ip ", "metadat", "x"} {
		if got := fieldName([]byte(s)); got != "" {
			t.Errorf("fieldName(%q) = %q, want none", s, got)
		}
	}
	if k, err := (&lexer{data: []byte(`"i\u0070"`)}).key(); err != nil || k != "ip" {
		t.Errorf(`key("i\u0070") = %q, %v; want "ip"`, k, err)
	}
}

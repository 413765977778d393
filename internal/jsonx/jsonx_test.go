package jsonx

import (
	"slices"
	"testing"
)

func TestIntRefusesNumbersInStrings(t *testing.T) {
	for raw, ok := range map[string]bool{`80`: true, `8e1`: true, `80.0`: true, `"80"`: false, `null`: false, `80.5`: false, ``: false} {
		var e Errors
		_, got := Int(Value(raw), "port", &e, 1, 65535)
		if got != ok {
			t.Errorf("Int(%s) ok = %v, want %v", raw, got, ok)
		}
		_, got = Counter(Value(raw), "n", &e)
		if got != ok {
			t.Errorf("Counter(%s) ok = %v, want %v", raw, got, ok)
		}
	}
}

// TestParseRefusesRepeatedNames: a name twice in any object, at any depth, escaped or
// not, is refused with the member's JSON path.
func TestParseRefusesRepeatedNames(t *testing.T) {
	for doc, want := range map[string]string{
		`{"a":1,"a":2}`:                               "a is repeated",
		`{"a":1,"\u0061":2}`:                          "a is repeated",
		`{"r":[{"h":1},{"h":1,"x":{},"h":2}]}`:        "r[1].h is repeated",
		`[0,{"k":{"a":null,"b":[],"b":true}}]`:        "[1].k.b is repeated",
		"{\n  \"revision\": 1,\n  \"revision\": 2\n}": "revision is repeated",
	} {
		_, err := Parse([]byte(doc))
		if err == nil || err.Error() != want || !IsRepeated(err) {
			t.Errorf("Parse(%s) = %v, want %q", doc, err, want)
		}
	}
	for _, doc := range []string{`{"a":1,"b":{"a":2}}`, `[{"a":1},{"a":2}]`, ` {"A":1,"a":2} `} {
		if _, err := Parse([]byte(doc)); err != nil {
			t.Errorf("Parse(%s) = %v, want nil: no object holds a name twice", doc, err)
		}
	}
}

func TestParseLocatesSyntaxErrors(t *testing.T) {
	for doc, want := range map[string]string{
		`{`:                "line 1, column 2: unexpected end of JSON input",
		"{\"a\":1,\n}":     "line 2, column 1: invalid character '}' looking for beginning of object key string",
		"{\"a\":\"\xff\"}": "line 1, column 7: invalid UTF-8",
		`{} {}`:            "line 1, column 4: invalid character '{' after top-level value",
	} {
		_, err := Parse([]byte(doc))
		if err == nil || err.Error() != want || IsRepeated(err) {
			t.Errorf("Parse(%q) = %v, want %q", doc, err, want)
		}
	}
}

// TestObjectBody: a body's repeated name is one violation naming its path, not also
// "must be an object".
func TestObjectBody(t *testing.T) {
	var e Errors
	m := ObjectBody([]byte(`{"offer":{"name":"x","name":"y"}}`), "data", &e, []string{"offer"}, nil)
	if m != nil || !slices.Equal(e.List(), []string{"data.offer.name is repeated"}) {
		t.Fatalf("ObjectBody = %v, %q", m, e.List())
	}
	e = Errors{}
	m = ObjectBody([]byte(`{"a":"\u00e9t\u00e9","b":1,"c":2}`), "", &e, []string{"a", "b"}, nil)
	if s, _ := m.Get("a").AsString(); s != "été" || !slices.Equal(e.List(), []string{"c is not allowed"}) {
		t.Fatalf("ObjectBody = %q, %q", s, e.List())
	}
	e = Errors{}
	if ObjectBody([]byte(`nope`), "request", &e, nil, nil) != nil || !slices.Equal(e.List(), []string{"request must be an object"}) {
		t.Fatalf("violations %q", e.List())
	}
}

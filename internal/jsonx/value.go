package jsonx

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// The readers below walk the spans of a checked Value: they find where a member or an
// element ends without building maps or copying bytes, which suits the small texts they
// read (envelopes, bodies, a certificate); a large text is read with a Stream, where
// jsontext's Decoder finds the ends in one pass. They rely on Parse's checks (valid
// syntax, no repeated names) and do not repeat them.

// Member is one member of an object: its decoded name and its value.
type Member struct {
	Key string
	Val Value
}

// Members are an object's members in document order; Parse saw to it that no name
// appears twice.
type Members []Member

// Lookup returns the value of key.
func (m Members) Lookup(key string) (Value, bool) {
	for i := range m {
		if m[i].Key == key {
			return m[i].Val, true
		}
	}
	return "", false
}

// Get returns the value of key, or the empty Value (which every reader refuses) when
// it is absent.
func (m Members) Get(key string) Value {
	v, _ := m.Lookup(key)
	return v
}

// Has reports whether key is a member.
func (m Members) Has(key string) bool {
	_, ok := m.Lookup(key)
	return ok
}

// IsNull reports whether v is the JSON literal null.
func (v Value) IsNull() bool { return v == "null" }

// IsObject reports whether v is an object.
func (v Value) IsObject() bool { return len(v) > 0 && v[0] == '{' }

// Fields returns the members of v, or false when v is not an object. It judges no keys:
// Object does.
func (v Value) Fields() (Members, bool) {
	if !v.IsObject() {
		return nil, false
	}
	s := string(v)
	fs := make(Members, 0, 4)
	i := 1
	for {
		i = skipWS(s, i)
		if i >= len(s) || s[i] == '}' {
			return fs, true
		}
		if s[i] == ',' {
			i = skipWS(s, i+1)
		}
		ke := skipString(s, i)
		key := unquote(s[i:ke])
		i = skipWS(s, ke) + 1 // the ':'
		i = skipWS(s, i)
		ve := skipValue(s, i)
		fs = append(fs, Member{key, Value(s[i:ve])})
		i = ve
	}
}

// Elements returns the elements of v, or false when v is not an array.
func (v Value) Elements() ([]Value, bool) {
	if len(v) == 0 || v[0] != '[' {
		return nil, false
	}
	s := string(v)
	out := []Value{}
	i := 1
	for {
		i = skipWS(s, i)
		if i >= len(s) || s[i] == ']' {
			return out, true
		}
		if s[i] == ',' {
			i = skipWS(s, i+1)
		}
		e := skipValue(s, i)
		out = append(out, Value(s[i:e]))
		i = e
	}
}

// AsString returns v's string.
func (v Value) AsString() (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	return unquote(string(v)), true
}

// AsBool returns v's boolean.
func (v Value) AsBool() (bool, bool) {
	switch v {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// AsInt returns v as an integral number (1, 1.0 and 1e3 are integers, as they are to a
// JavaScript peer) when it is one within ±MaxSafeInteger or an exact int64.
func (v Value) AsInt() (int64, bool) {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, false
	}
	if len(v) <= 15 && (v[0] != '0' || len(v) == 1) { // plain digits: the common case
		if n, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			return int64(n), true
		}
	}
	if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
		return i, true
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsInf(f, 0) || f != math.Trunc(f) || math.Abs(f) > MaxSafeInteger {
		return 0, false
	}
	return int64(f), true
}

// AsFloat returns v's number.
func (v Value) AsFloat() (float64, bool) {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	return f, err == nil
}

// Object reads v as an object holding every key of required, any of optional and nothing
// else. It reports a non-object, each missing key and each extra key (sorted). The result
// is nil only when v is not an object; it may be used for the keys that are present even
// when keys were missing or extra, so that the caller reports every other violation too.
func Object(v Value, path string, e *Errors, required, optional []string) Members {
	fs, ok := v.Fields()
	if !ok {
		e.Addf("", "%s must be an object", Name(path))
		return nil
	}
	for _, k := range required {
		if !fs.Has(k) {
			e.Addf(Join(path, k), "is missing")
		}
	}
	var extra []string
	for _, f := range fs {
		if !slices.Contains(required, f.Key) && !slices.Contains(optional, f.Key) {
			extra = append(extra, f.Key)
		}
	}
	slices.Sort(extra)
	for _, k := range extra {
		e.Addf(Join(path, k), "is not allowed")
	}
	return fs
}

// Array reads v as an array.
func Array(v Value, path string, e *Errors) ([]Value, bool) {
	a, ok := v.Elements()
	if !ok {
		e.Addf("", "%s must be an array", Name(path))
	}
	return a, ok
}

// String reads v as a string.
func String(v Value, path string, e *Errors) (string, bool) {
	s, ok := v.AsString()
	if !ok {
		e.Addf("", "%s must be a string", Name(path))
	}
	return s, ok
}

// Bool reads v as a boolean.
func Bool(v Value, path string, e *Errors) (bool, bool) {
	b, ok := v.AsBool()
	if !ok {
		e.Addf("", "%s must be a boolean", Name(path))
	}
	return b, ok
}

// Int reads v as an integer from min to max; the violation reads
// "PATH must be an integer from MIN to MAX".
func Int(v Value, path string, e *Errors, min, max int64) (int64, bool) {
	i, ok := v.AsInt()
	if !ok || i < min || i > max {
		e.Addf("", "%s must be an integer from %d to %d", Name(path), min, max)
		return 0, false
	}
	return i, true
}

// Counter reads v as a non-negative safe integer (0 … 2^53−1).
func Counter(v Value, path string, e *Errors) (int64, bool) {
	i, ok := v.AsInt()
	if !ok || i < 0 || i > MaxSafeInteger {
		e.Addf("", "%s must be a non-negative safe integer", Name(path))
		return 0, false
	}
	return i, true
}

func skipWS(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index after the string that starts at s[i] (a '"').
func skipString(s string, i int) int {
	i++
	for {
		j := strings.IndexByte(s[i:], '"')
		if j < 0 {
			return len(s)
		}
		q := i + j
		k := q - 1
		for k >= i && s[k] == '\\' {
			k--
		}
		if (q-1-k)%2 == 0 { // an even run of backslashes: the quote is not escaped
			return q + 1
		}
		i = q + 1
	}
}

// skipValue returns the index after the value that starts at s[i].
func skipValue(s string, i int) int {
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for i < len(s) {
			switch s[i] {
			case '"':
				i = skipString(s, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // number, true, false, null
		for i < len(s) {
			switch s[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// unquote decodes a string span. Plain ASCII without escapes (hostnames, ids, addresses)
// is returned as a substring of the text without copying.
func unquote(v string) string {
	plain := true
	for i := 1; i < len(v)-1; i++ {
		if c := v[i]; c == '\\' || c >= 0x80 {
			plain = false
			break
		}
	}
	if plain {
		return v[1 : len(v)-1]
	}
	b, err := jsontext.AppendUnquote(nil, v)
	if err != nil { // not a checked string: cannot happen after Parse
		return ""
	}
	return string(b)
}

package routetable

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"github.com/serve-zone/ingress/internal/jsonx"
)

// This file is a one-pass reader for JSON that encoding/json has already judged valid:
// it finds the spans of values without building maps or copying bytes, so a 100,000-route
// table decodes in one pass over the text per nesting level instead of one
// json.Unmarshal per level. Its messages are the ones internal/jsonx writes, so the
// exact-schema rule reads the same everywhere.

// field is one member of an object: its decoded key and the span of its value.
type field struct {
	key string
	val string
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

// members splits an object span into its fields, in document order.
func members(v string) []field {
	fs := make([]field, 0, 4)
	i := 1
	for {
		i = skipWS(v, i)
		if i >= len(v) || v[i] == '}' {
			return fs
		}
		if v[i] == ',' {
			i = skipWS(v, i+1)
		}
		ke := skipString(v, i)
		key := unquote(v[i:ke])
		i = skipWS(v, ke) + 1 // the ':'
		i = skipWS(v, i)
		ve := skipValue(v, i)
		fs = append(fs, field{key, v[i:ve]})
		i = ve
	}
}

// elements splits an array span into its elements' spans.
func elements(v string) []string {
	var out []string
	i := 1
	for {
		i = skipWS(v, i)
		if i >= len(v) || v[i] == ']' {
			return out
		}
		if v[i] == ',' {
			i = skipWS(v, i+1)
		}
		e := skipValue(v, i)
		out = append(out, v[i:e])
		i = e
	}
}

// unquote decodes a string span. Plain ASCII without escapes (hostnames, ids, addresses)
// is returned as a substring of the document without copying.
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
	var s string
	_ = json.Unmarshal([]byte(v), &s) // valid JSON: cannot fail
	return s
}

func pathName(path string) string {
	if path == "" {
		return "the value"
	}
	return path
}

// object returns the members of v, reporting a non-object, each missing key and each
// extra key exactly as jsonx.Object does. nil means v is not an object. A repeated key is
// a violation too: readers disagree on which of its values counts.
func object(v, path string, e *jsonx.Errors, required []string) []field {
	if len(v) == 0 || v[0] != '{' {
		e.Addf("", "%s must be an object", pathName(path))
		return nil
	}
	fs := members(v)
	for _, k := range required {
		if _, ok := get(fs, k); !ok {
			e.Addf(jsonx.Join(path, k), "is missing")
		}
	}
	var extra, repeated []string
	var seen map[string]int // only for objects too big for the quadratic scan
	if len(fs) > 8 {
		seen = make(map[string]int, len(fs))
	}
	for i, f := range fs {
		dup := false
		if seen != nil {
			seen[f.key]++
			dup = seen[f.key] == 2
		} else {
			for _, g := range fs[:i] {
				if g.key == f.key {
					dup = !containsString(repeated, f.key)
					break
				}
			}
		}
		if dup {
			repeated = append(repeated, f.key)
			e.Addf(jsonx.Join(path, f.key), "is repeated")
		}
		if seen != nil && seen[f.key] > 1 {
			continue
		}
		known := false
		for _, k := range required {
			if f.key == k {
				known = true
				break
			}
		}
		if !known && (seen != nil || !containsString(extra, f.key)) {
			extra = append(extra, f.key)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		for _, k := range extra {
			e.Addf(jsonx.Join(path, k), "is not allowed")
		}
	}
	if fs == nil {
		fs = []field{}
	}
	return fs
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func get(fs []field, key string) (string, bool) {
	for i := len(fs) - 1; i >= 0; i-- {
		if fs[i].key == key {
			return fs[i].val, true
		}
	}
	return "", false
}

func array(v, path string, e *jsonx.Errors) ([]string, bool) {
	if len(v) == 0 || v[0] != '[' {
		e.Addf("", "%s must be an array", pathName(path))
		return nil, false
	}
	return elements(v), true
}

func str(v, parent, key string, e *jsonx.Errors) string {
	if len(v) == 0 || v[0] != '"' {
		e.Addf("", "%s must be a string", jsonx.Join(parent, key))
		return ""
	}
	return unquote(v)
}

func boolean(v, parent, key string, e *jsonx.Errors) bool {
	switch v {
	case "true":
		return true
	case "false":
		return false
	}
	e.Addf("", "%s must be a boolean", jsonx.Join(parent, key))
	return false
}

// integer reads an integer in [min, max]; plain digit strings take a fast path, any other
// number form (1.0, 1e3, -0) goes through jsonx for the same judgement and message.
func integer(v, parent, key string, e *jsonx.Errors, min, max int64) int64 {
	if len(v) > 0 && len(v) <= 15 && (v[0] != '0' || len(v) == 1) {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			if int64(n) >= min && int64(n) <= max {
				return int64(n)
			}
			e.Addf("", "%s must be an integer from %d to %d", jsonx.Join(parent, key), min, max)
			return 0
		}
	}
	n, _ := jsonx.Int(json.RawMessage(v), jsonx.Join(parent, key), e, min, max)
	return n
}

// counter reads a non-negative safe integer, with jsonx's judgement and message.
func counter(v, parent, key string, e *jsonx.Errors) (int64, bool) {
	if len(v) > 0 && len(v) <= 16 && (v[0] != '0' || len(v) == 1) {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			if n <= jsonx.MaxSafeInteger {
				return int64(n), true
			}
			e.Addf("", "%s must be a non-negative safe integer", jsonx.Join(parent, key))
			return 0, false
		}
	}
	return jsonx.Counter(json.RawMessage(v), jsonx.Join(parent, key), e)
}

// Package jsonx decodes untrusted JSON under the contract's "exact schema" rule: an object
// has exactly its listed keys, a missing key, an extra key or a value of the wrong type is
// a violation, and every violation is collected with its JSON path instead of stopping at
// the first. Packages build their typed decoders from these pieces.
package jsonx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
)

// MaxSafeInteger is 2^53-1, the largest integer JSON peers written in JavaScript represent exactly.
const MaxSafeInteger = 1<<53 - 1

// Errors collects violations, each a sentence that starts with its JSON path. The zero
// value is ready to use. It is not safe for concurrent use.
type Errors struct {
	list []string
}

// Addf records one violation at path.
func (e *Errors) Addf(path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + " " + msg
	}
	e.list = append(e.list, msg)
}

// Len returns the number of violations.
func (e *Errors) Len() int { return len(e.list) }

// List returns the violations in the order they were found.
func (e *Errors) List() []string { return e.list }

// Err returns nil without violations, otherwise one error per violation joined with
// errors.Join (so its text is one violation per line).
func (e *Errors) Err() error {
	if len(e.list) == 0 {
		return nil
	}
	errs := make([]error, len(e.list))
	for i, s := range e.list {
		errs[i] = errors.New(s)
	}
	return errors.Join(errs...)
}

// Join returns a path for a key below path.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Index returns a path for an array element below path.
func Index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func name(path string) string {
	if path == "" {
		return "the value"
	}
	return path
}

// IsNull reports whether raw is the JSON literal null.
func IsNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// Object reads raw as an object holding every key of required, any of optional and nothing
// else. It reports a non-object, each missing key and each extra key. The returned map is
// nil only when raw is not an object; it may be used for the keys that are present even
// when keys were missing or extra, so that the caller reports every other violation too.
func Object(raw json.RawMessage, path string, e *Errors, required, optional []string) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if len(raw) == 0 || IsNull(raw) || json.Unmarshal(raw, &m) != nil || m == nil {
		e.Addf("", "%s must be an object", name(path))
		return nil
	}
	for _, k := range required {
		if _, ok := m[k]; !ok {
			e.Addf(Join(path, k), "is missing")
		}
	}
	var extra []string
	for k := range m {
		if !contains(required, k) && !contains(optional, k) {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		e.Addf(Join(path, k), "is not allowed")
	}
	return m
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Array reads raw as an array.
func Array(raw json.RawMessage, path string, e *Errors) ([]json.RawMessage, bool) {
	var a []json.RawMessage
	if len(raw) == 0 || IsNull(raw) || json.Unmarshal(raw, &a) != nil {
		e.Addf("", "%s must be an array", name(path))
		return nil, false
	}
	return a, true
}

// String reads raw as a string.
func String(raw json.RawMessage, path string, e *Errors) (string, bool) {
	var s string
	if len(raw) == 0 || IsNull(raw) || json.Unmarshal(raw, &s) != nil {
		e.Addf("", "%s must be a string", name(path))
		return "", false
	}
	return s, true
}

// Bool reads raw as a boolean.
func Bool(raw json.RawMessage, path string, e *Errors) (bool, bool) {
	var b bool
	if len(raw) == 0 || IsNull(raw) || json.Unmarshal(raw, &b) != nil {
		e.Addf("", "%s must be a boolean", name(path))
		return false, false
	}
	return b, true
}

// number reads raw as an integral JSON number (1, 1.0 and 1e3 are integers, as they are
// to a JavaScript peer) within [min, max].
func number(raw json.RawMessage) (int64, bool) {
	var n json.Number
	// encoding/json also fills a json.Number from a JSON string holding a number ("80"),
	// which the exact schema must refuse as the wrong type.
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] == '"' || IsNull(raw) || json.Unmarshal(raw, &n) != nil {
		return 0, false
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i, true
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) || f != math.Trunc(f) || math.Abs(f) > MaxSafeInteger {
		return 0, false
	}
	return int64(f), true
}

// Int reads raw as an integer from min to max; the violation reads
// "PATH must be an integer from MIN to MAX".
func Int(raw json.RawMessage, path string, e *Errors, min, max int64) (int64, bool) {
	i, ok := number(raw)
	if !ok || i < min || i > max {
		e.Addf("", "%s must be an integer from %d to %d", name(path), min, max)
		return 0, false
	}
	return i, true
}

// Counter reads raw as a non-negative safe integer (0 … 2^53−1).
func Counter(raw json.RawMessage, path string, e *Errors) (int64, bool) {
	i, ok := number(raw)
	if !ok || i < 0 || i > MaxSafeInteger {
		e.Addf("", "%s must be a non-negative safe integer", name(path))
		return 0, false
	}
	return i, true
}

// IsID reports whether s is a contract Id: 1–128 characters of [A-Za-z0-9._:-], starting
// with a letter or digit.
func IsID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if i == 0 && !alnum {
			return false
		}
		if !alnum && c != '.' && c != '_' && c != ':' && c != '-' {
			return false
		}
	}
	return true
}

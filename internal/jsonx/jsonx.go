// Package jsonx is the one reader of untrusted JSON (relay envelopes and bodies, route
// tables, state files, statistics queries) under the contract's "exact schema" rule.
//
// [Parse] checks a text once with go-json-experiment's jsontext: RFC 8259 syntax, UTF-8,
// and no member name repeated in any object (readers disagree on which of two values
// counts, so a repeated name is refused, never resolved). What it returns is a [Value],
// the checked text itself; [Object], [Array], [String], [Bool], [Int] and [Counter] then
// judge its shape without building maps or copying bytes. An object has exactly its
// listed keys: a missing key, an extra key or a value of the wrong type is a violation,
// and every violation is collected with its JSON path instead of stopping at the first.
//
// [Stream] applies the same rules to a text too large to hold as a Value (the route
// table), walking it once with jsontext's Decoder.
package jsonx

import (
	"errors"
	"fmt"
	"slices"
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

// insert puts v before the violation at index mark (Len, when it was taken).
func (e *Errors) insert(mark int, v []string) {
	if len(v) == 0 {
		return
	}
	e.list = slices.Insert(e.list, mark, v...)
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

// Name is path as a sentence's subject: "the value" for the root.
func Name(path string) string {
	if path == "" {
		return "the value"
	}
	return path
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

package env

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap/zapcore"
)

const redacted = "[redacted]"

// Bearer is the registration bearer. Every way of printing or encoding it (String,
// GoString, every fmt verb, JSON, text, zap) yields "[redacted]", so it can travel through
// structs that get logged without leaking. The zero value is an empty bearer.
type Bearer struct {
	value string
}

// NewBearer wraps a bearer value (tests and the demo; production reads it with Read).
func NewBearer(v string) Bearer { return Bearer{value: v} }

// Reveal returns the bearer's value. Only the registration request may call it.
func (b Bearer) Reveal() string { return b.value }

// IsZero reports whether the bearer is empty.
func (b Bearer) IsZero() bool { return b.value == "" }

func (Bearer) String() string   { return redacted }
func (Bearer) GoString() string { return redacted }

// Format makes every fmt verb, %x and %q included, print the placeholder.
func (Bearer) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

func (Bearer) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }
func (Bearer) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// MarshalLogObject makes zap.Object print the placeholder; zap.Any and zap.Stringer use
// String or MarshalText, which do too.
func (Bearer) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("bearer", redacted)
	return nil
}

// minEncodedCore is the shortest base64 rendering of the bearer that Scrubber looks for: a
// shorter one would match unrelated base64 text too often.
const minEncodedCore = 8

// Scrubber returns the one function that takes the bearer out of text the ingress did not
// write itself: the relay's error texts, refusal reasons, echoed keys and values, close
// reasons, and whatever else a peer sends that may reach a log line, a metric or an error
// text. It replaces every occurrence of the bearer's value with "[redacted]", and also the
// forms in which a peer may echo it: JSON-escaped (with and without HTML escaping),
// Go-quoted, URL-escaped, upper- or lower-cased, hexadecimal (either case) and base64
// (standard and URL alphabets, padded or not, alone or inside a longer encoded text). A
// text that still holds 8 bytes in a row of the bearer after any chain of up to three
// common decodings (entities, %xx, backslash escapes, hex with or without separators,
// base64, reversal, rot13; case ignored) is withheld whole (see holdsBearer). Since no
// list of encodings is complete, text a peer chose is logged through this function at
// debug level only; higher levels carry its fingerprint. The zero bearer's scrubber
// returns text unchanged. The function is safe for concurrent use.
func (b Bearer) Scrubber() func(string) string {
	if b.value == "" {
		return func(s string) string { return s }
	}
	forms := echoForms(b.value)
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, redacted)
	}
	replace := strings.NewReplacer(pairs...).Replace
	v := b.value
	return func(s string) string {
		s = replace(s)
		if holdsBearer(v, s) {
			return withheld
		}
		return s
	}
}

// echoForms lists v and its encodings, unique, longest first: strings.Replacer takes the
// first listed form that matches at a position, so a longer form is never cut short by a
// shorter one it contains.
func echoForms(v string) []string {
	var forms []string
	add := func(f string) {
		if f != "" && !slices.Contains(forms, f) {
			forms = append(forms, f)
		}
	}
	add(v)
	q := strconv.Quote(v) // also JSON without HTML escaping, for visible ASCII
	add(q[1 : len(q)-1])
	if j, err := json.Marshal(v); err == nil { // \u003c for <, \u003e for >, \u0026 for &
		add(string(j[1 : len(j)-1]))
	}
	add(url.QueryEscape(v))
	add(url.PathEscape(v))
	// A peer that changes the case of what it echoes (an upper-cased error text), or
	// echoes its bytes in hexadecimal (a debug dump), in either case.
	add(strings.ToUpper(v))
	add(strings.ToLower(v))
	add(hex.EncodeToString([]byte(v)))
	add(strings.ToUpper(hex.EncodeToString([]byte(v))))
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for lead := range 3 {
			add(base64Core(enc, v, lead))
		}
	}
	slices.SortStableFunc(forms, func(a, b string) int { return len(b) - len(a) })
	return forms
}

// base64Core returns the characters of the base64 encoding of (lead other bytes, v, more
// bytes) that depend on v's bytes alone: they appear wherever v starts at that offset
// modulo 3 in an encoded text, whatever surrounds it. "" when they are too few to be
// told from chance.
func base64Core(enc *base64.Encoding, v string, lead int) string {
	s := enc.EncodeToString(append(make([]byte, lead), v...))
	start := (8*lead + 5) / 6      // the first character past the lead's bits
	end := 8 * (lead + len(v)) / 6 // the characters whose six bits lie within v
	if end-start < minEncodedCore {
		return ""
	}
	return s[start:end]
}

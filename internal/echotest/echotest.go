// Package echotest is test support for the rule that no text a peer chose reaches a log
// line: the encodings a hostile relay echoes a secret in (the 24 of issue 25's finding 4
// and more), random chains of them, and the checks the tests assert with. Shipped packages
// never import it.
package echotest

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Encoding is one way a peer may echo a text.
type Encoding struct {
	Name string
	Fn   func(string) string
}

// Encodings lists the ways a hostile relay echoed the bearer in issue 25, and a few more.
var Encodings = []Encoding{
	{"plain", func(s string) string { return s }},
	{"go-quoted", func(s string) string { q := strconv.Quote(s); return q[1 : len(q)-1] }},
	{"html-entities", html.EscapeString},
	{"decimal-entities", eachByte(func(b byte) string { return "&#" + strconv.Itoa(int(b)) + ";" })},
	{"hex-entities", eachByte(func(b byte) string { return fmt.Sprintf("&#x%x;", b) })},
	{"query-escaped", url.QueryEscape},
	{"lower-percent-every-byte", eachByte(func(b byte) string { return fmt.Sprintf("%%%02x", b) })},
	{"upper-percent-every-byte", eachByte(func(b byte) string { return fmt.Sprintf("%%%02X", b) })},
	{"u-escapes", eachByte(func(b byte) string { return fmt.Sprintf(`\u%04x`, b) })},
	{"x-escapes", eachByte(func(b byte) string { return fmt.Sprintf(`\x%02x`, b) })},
	{"hex", func(s string) string { return hex.EncodeToString([]byte(s)) }},
	{"upper-hex", func(s string) string { return strings.ToUpper(hex.EncodeToString([]byte(s))) }},
	{"hex-colons", hexSep(":")},
	{"hex-spaces", hexSep(" ")},
	{"hex-dashes", hexSep("-")},
	{"upper-case", strings.ToUpper},
	{"lower-case", strings.ToLower},
	{"swapped-case", swapCase},
	{"first-half", func(s string) string { return s[:len(s)/2] }},
	{"second-half", func(s string) string { return s[len(s)/2:] }},
	{"reversed", reverse},
	{"rot13", rot13},
	{"base64", func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }},
	{"base64-url-raw", func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }},
	{"base64-after-one-byte", func(s string) string { return base64.StdEncoding.EncodeToString([]byte("x" + s)) }},
	{"json-in-json", func(s string) string { q := strconv.Quote(strconv.Quote(s)); return q[1 : len(q)-1] }},
}

// decoders are the decodings HoldsSecret tries (the other encodings keep runs of the text
// readable: halves, case changes, which it matches case-insensitively).
var decoders = []func(string) string{
	html.UnescapeString, unpercent, unescapeBackslash, unhexRuns, unbase64Runs, reverse, rot13,
}

// Chain returns a random chain of 1 to n encodings and its name.
func Chain(rng *rand.Rand, n int) (func(string) string, string) {
	k := 1 + rng.IntN(n)
	var chain []Encoding
	for range k {
		chain = append(chain, Encodings[rng.IntN(len(Encodings))])
	}
	names := make([]string, len(chain))
	for i, e := range chain {
		names[i] = e.Name
	}
	return func(s string) string {
		for _, e := range chain {
			s = e.Fn(s)
		}
		return s
	}, strings.Join(names, "∘")
}

// Windows returns the runs of n bytes of s, lower-cased.
func Windows(s string, n int) []string {
	s = strings.ToLower(s)
	if len(s) <= n {
		return []string{s}
	}
	var out []string
	for i := 0; i+n <= len(s); i++ {
		out = append(out, s[i:i+n])
	}
	return out
}

// SharesWindow reports whether text holds any run of n bytes of s as it is (case kept):
// the check that no text a peer sent reached a line verbatim.
func SharesWindow(text, s string, n int) (string, bool) {
	if len(s) < n {
		return "", s != "" && strings.Contains(text, s)
	}
	for i := 0; i+n <= len(s); i++ {
		if w := s[i : i+n]; strings.Contains(text, w) {
			return w, true
		}
	}
	return "", false
}

// HoldsSecret reports whether text, or any chain of up to depth decodings of it (entities,
// %xx, backslash escapes, hex runs, base64 runs, reversal, rot13), holds a run of n bytes
// of secret, case ignored.
func HoldsSecret(text, secret string, n, depth int) bool {
	ws := Windows(secret, n)
	level := []string{text}
	seen := map[string]bool{text: true}
	for d := 0; ; d++ {
		for _, c := range level {
			lc := strings.ToLower(c)
			if slices.ContainsFunc(ws, func(w string) bool { return strings.Contains(lc, w) }) {
				return true
			}
		}
		if d == depth {
			return false
		}
		var next []string
		for _, c := range level {
			for _, dec := range decoders {
				if x := dec(c); !seen[x] {
					seen[x] = true
					next = append(next, x)
				}
			}
		}
		level = next
	}
}

func eachByte(f func(byte) string) func(string) string {
	return func(s string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			b.WriteString(f(s[i]))
		}
		return b.String()
	}
}

func hexSep(sep string) func(string) string {
	return func(s string) string {
		parts := make([]string, len(s))
		for i := 0; i < len(s); i++ {
			parts[i] = hex.EncodeToString([]byte{s[i]})
		}
		return strings.Join(parts, sep)
	}
}

func swapCase(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsUpper(r) {
			return unicode.ToLower(r)
		}
		return unicode.ToUpper(r)
	}, s)
}

func reverse(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}

func rot13(s string) string {
	return strings.Map(func(c rune) rune {
		switch {
		case c >= 'a' && c <= 'z':
			return 'a' + (c-'a'+13)%26
		case c >= 'A' && c <= 'Z':
			return 'A' + (c-'A'+13)%26
		}
		return c
	}, s)
}

func unpercent(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unescapeBackslash(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch c := s[i+1]; {
		case c == 'u' && i+6 <= len(s):
			if v, err := strconv.ParseUint(s[i+2:i+6], 16, 32); err == nil {
				b.WriteRune(rune(v))
				i += 5
				continue
			}
		case c == 'x' && i+4 <= len(s):
			if v, err := strconv.ParseUint(s[i+2:i+4], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i+1])
		i++
	}
	return b.String()
}

func isHex(c byte) bool { return strings.IndexByte("0123456789abcdefABCDEF", c) >= 0 }

// unhexRuns decodes runs of hex pairs, each pair optionally after one separator.
func unhexRuns(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j, digits := i, []byte{}
		for j+1 < len(s) && isHex(s[j]) && isHex(s[j+1]) {
			digits = append(digits, s[j], s[j+1])
			j += 2
			if j+2 < len(s) && !isHex(s[j]) && isHex(s[j+1]) && isHex(s[j+2]) {
				j++
			}
		}
		if len(digits) >= 4 {
			v, _ := hex.DecodeString(string(digits))
			b.Write(v)
			i = j
			continue
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}

// unbase64Runs decodes every run of base64 characters at each offset, joined by spaces.
func unbase64Runs(s string) string {
	var parts []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool {
		return !(r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("+/-_", r)))
	}) {
		f = strings.NewReplacer("-", "+", "_", "/").Replace(f)
		for off := 0; off < 4 && off < len(f); off++ {
			t := f[off:]
			if len(t)%4 == 1 {
				t = t[:len(t)-1]
			}
			if v, err := base64.RawStdEncoding.DecodeString(t); err == nil {
				parts = append(parts, string(v))
			}
		}
	}
	return strings.Join(parts, " ")
}

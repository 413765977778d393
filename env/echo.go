package env

import (
	"encoding/base64"
	"encoding/hex"
	"html"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The scrubber's second stage. Replacing the encodings of the bearer it knows is a
// blacklist: a peer that echoes the bearer reversed, rot13'd, as HTML entities or as hex
// with separators gets past it. So after the replacement, the text is decoded every way a
// peer commonly encodes text, in chains up to echoDepth long, and when any decoding holds
// echoWindow bytes in a row of the bearer (case ignored), the whole text is withheld. This
// runs only on text a peer chose, where it is written down (a debug line, a table's
// violations, which routetable bounds to 1,000, an answer to the relay): about 0.2 ms for
// a 100-byte text, which is not cheap and is not meant to be.

// echoWindow is the shortest run of the bearer's bytes that counts as an echo of it.
const echoWindow = 8

// echoDepth is the longest chain of decodings tried on one text.
const echoDepth = 3

// maxEchoCandidates bounds the decodings kept for one text; a text that would need more
// is withheld, as if it held the bearer.
const maxEchoCandidates = 4096

// withheld replaces a text that may hold the bearer.
const withheld = "[withheld: may hold the bearer]"

// echoDecoders are the decodings tried, each returning "" when it changes nothing.
var echoDecoders = []func(string) string{
	decodeEntities, decodePercent, decodeBackslash, decodeHexRuns, decodeBase64Runs, reverse, rot13,
}

// holdsBearer reports whether s, or a chain of up to echoDepth decodings of it, holds
// echoWindow bytes in a row of the bearer v (case ignored).
func holdsBearer(v, s string) bool {
	windows := bearerWindows(v)
	if len(windows) == 0 {
		return false
	}
	seen := map[string]bool{s: true}
	level := []string{s}
	for depth := 0; ; depth++ {
		for _, c := range level {
			lc := strings.ToLower(c)
			for _, w := range windows {
				if strings.Contains(lc, w) {
					return true
				}
			}
		}
		if depth == echoDepth {
			return false
		}
		var next []string
		for _, c := range level {
			for _, dec := range echoDecoders {
				d := dec(c)
				if d == "" || seen[d] {
					continue
				}
				if len(seen) >= maxEchoCandidates {
					return true
				}
				seen[d] = true
				next = append(next, d)
			}
		}
		if len(next) == 0 {
			return false
		}
		level = next
	}
}

// bearerWindows returns the lower-cased runs of echoWindow bytes of v (v itself when it
// is shorter).
func bearerWindows(v string) []string {
	lv := strings.ToLower(v)
	if len(lv) <= echoWindow {
		return []string{lv}
	}
	var out []string
	for i := 0; i+echoWindow <= len(lv); i++ {
		if w := lv[i : i+echoWindow]; !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// changed returns d, or "" when it is s.
func changed(s, d string) string {
	if d == s {
		return ""
	}
	return d
}

// decodeEntities decodes HTML entities, named and numeric.
func decodeEntities(s string) string {
	if !strings.Contains(s, "&") {
		return ""
	}
	return changed(s, html.UnescapeString(s))
}

// decodePercent decodes every %xx, either case, leaving anything else as it is.
func decodePercent(s string) string {
	if !strings.Contains(s, "%") {
		return ""
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := hex.DecodeString(s[i+1 : i+3]); err == nil {
				b.WriteByte(v[0])
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return changed(s, b.String())
}

// backslashEscape is a Go, JSON or C escape: \uXXXX, \UXXXXXXXX, \xXX, or \ and one
// character.
var backslashEscape = regexp.MustCompile(`\\(?:u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|x[0-9a-fA-F]{2}|.)`)

// decodeBackslash decodes backslash escapes.
func decodeBackslash(s string) string {
	if !strings.Contains(s, `\`) {
		return ""
	}
	return changed(s, backslashEscape.ReplaceAllStringFunc(s, func(e string) string {
		switch e[1] {
		case 'u', 'U', 'x':
			n, err := strconv.ParseUint(e[2:], 16, 32)
			if err != nil {
				return e
			}
			if e[1] == 'x' {
				return string([]byte{byte(n)})
			}
			return string(rune(n))
		case 'n':
			return "\n"
		case 't':
			return "\t"
		case 'r':
			return "\r"
		}
		return e[1:]
	}))
}

// hexRun is two or more hex-digit pairs, each optionally after one separator.
var hexRun = regexp.MustCompile(`[0-9a-fA-F]{2}(?:[^0-9a-fA-F]?[0-9a-fA-F]{2})+`)

// decodeHexRuns decodes every run of hexadecimal byte pairs, separated or not.
func decodeHexRuns(s string) string {
	return changed(s, hexRun.ReplaceAllStringFunc(s, func(r string) string {
		digits := strings.Map(func(c rune) rune {
			if strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return c
			}
			return -1
		}, r)
		b, err := hex.DecodeString(digits[:len(digits)&^1])
		if err != nil {
			return r
		}
		return string(b)
	}))
}

// base64Run is a run of base64 characters (either alphabet) long enough to hold a window.
var base64Run = regexp.MustCompile(`[A-Za-z0-9+/_-]{11,}`)

// decodeBase64Runs decodes every run of base64 characters, at each of the four offsets a
// cut-out piece may start at, and joins the decodings with spaces.
func decodeBase64Runs(s string) string {
	runs := base64Run.FindAllString(s, -1)
	if len(runs) == 0 {
		return ""
	}
	var parts []string
	for _, r := range runs {
		std := strings.NewReplacer("-", "+", "_", "/").Replace(r)
		for off := range 4 {
			t := std[off:]
			if len(t)%4 == 1 { // no encoding ends so: the last character is not of it
				t = t[:len(t)-1]
			}
			if b, err := base64.RawStdEncoding.DecodeString(t); err == nil {
				parts = append(parts, string(b))
			}
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, " ")
}

// reverse returns s's bytes in reverse order (a reversed ASCII text reads back).
func reverse(s string) string {
	if len(s) < 2 {
		return ""
	}
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}

// rot13 rotates ASCII letters by 13.
func rot13(s string) string {
	out := strings.Map(func(c rune) rune {
		switch {
		case c >= 'a' && c <= 'z':
			return 'a' + (c-'a'+13)%26
		case c >= 'A' && c <= 'Z':
			return 'A' + (c-'A'+13)%26
		}
		return c
	}, s)
	return changed(s, out)
}

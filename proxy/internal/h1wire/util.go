package h1wire

import (
	"bytes"

	"github.com/serve-zone/ingress/internal/ascii"
)

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseContentLength accepts 1 to 18 decimal digits.
func parseContentLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// hasTokenBytes reports whether the comma-separated list v contains tok (lowercase),
// ignoring parameters (TE: trailers;q=1).
func hasTokenBytes(v []byte, tok string) bool {
	for len(v) > 0 {
		var t []byte
		t, v, _ = bytes.Cut(v, []byte{','})
		if i := bytes.IndexByte(t, ';'); i >= 0 {
			t = t[:i]
		}
		if ascii.EqualLower(trimOWS(t), tok) {
			return true
		}
	}
	return false
}

// hasConnToken is hasTokenBytes for Connection, read as net/http reads it: a token with
// parameters is another token.
func hasConnToken(v []byte, tok string) bool {
	for len(v) > 0 {
		var t []byte
		t, v, _ = bytes.Cut(v, []byte{','})
		if ascii.EqualLower(trimOWS(t), tok) {
			return true
		}
	}
	return false
}

// trimOWS trims spaces and tabs (not the Unicode spaces bytes.TrimSpace knows).
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// Package redact takes private keys out of text the ingress did not write itself (what a
// relay answers, the violations of a table it sent) before that text reaches a log line,
// an error or a metric. It is not on any request's hot path: relay answers and table
// judgements only.
package redact

import "regexp"

// Marker replaces what was taken out.
const Marker = "[redacted]"

var (
	// pemKey is a PEM private key block (any type: PRIVATE KEY, EC PRIVATE KEY, RSA
	// PRIVATE KEY, ENCRYPTED PRIVATE KEY), as it is or escaped (its newlines as \n), up
	// to its end line, or to the end of the text when it was cut before it.
	pemKey = regexp.MustCompile(`(?s)-----BEGIN[ A-Z]*PRIVATE KEY-----.*?(?:-----END[ A-Z]*PRIVATE KEY-----|\z)`)
	// longBase64 is a run of base64 (either alphabet) no shorter than one full PEM line:
	// a key's body without its armour, one line of it, or all of it on one line.
	longBase64 = regexp.MustCompile(`[A-Za-z0-9+/_-]{64,}={0,2}`)
)

// PrivateKeys returns s with every PEM private key block and every run of 64 or more
// base64 characters replaced by Marker.
func PrivateKeys(s string) string {
	if len(s) < 64 {
		return s
	}
	s = pemKey.ReplaceAllLiteralString(s, Marker)
	return longBase64.ReplaceAllLiteralString(s, Marker)
}

// Chain returns a function that applies PrivateKeys after scrub (scrub nil: PrivateKeys
// alone).
func Chain(scrub func(string) string) func(string) string {
	if scrub == nil {
		return PrivateKeys
	}
	return func(s string) string { return PrivateKeys(scrub(s)) }
}

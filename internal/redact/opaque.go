package redact

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
)

// Fingerprint names text another party chose without quoting any of it: its length in
// bytes and the first 8 hexadecimal digits of its SHA-256, as "37 bytes, sha256 1a2b3c4d".
// Log lines and error texts carry this instead of the text, since a scrubber that looks
// for known encodings of a secret is a blacklist: a peer that echoes the secret in an
// encoding it does not know gets it into the log. The hash lets a reader match the line
// against the debug line holding the scrubbed text, or against what the peer says it sent;
// 32 bits of a hash over a text holding a high-entropy secret reveal nothing usable of it.
func Fingerprint(s string) string {
	sum := sha256.Sum256([]byte(s))
	return strconv.Itoa(len(s)) + " bytes, sha256 " + hex.EncodeToString(sum[:4])
}

// OpaqueError wraps an error whose text may quote another party (a close reason, an
// unexpected key, a certificate's names). Its Error is What, written by the ingress, and
// the fingerprint of the wrapped error's text, never that text; Unwrap returns the wrapped
// error, so errors.Is and errors.As still see what it wraps. Raw gives the text back for
// a debug line that scrubs it.
type OpaqueError struct {
	What string
	Err  error
}

// Opaque returns err wrapped in an *OpaqueError saying what; nil for a nil err.
func Opaque(what string, err error) error {
	if err == nil {
		return nil
	}
	return &OpaqueError{What: what, Err: err}
}

func (e *OpaqueError) Error() string { return e.What + " (" + Fingerprint(e.Err.Error()) + ")" }

func (e *OpaqueError) Unwrap() error { return e.Err }

// Raw returns the text of the first *OpaqueError in err's chain, the one its Error leaves
// out, and whether there is one. Its only use is a debug line, scrubbed.
func Raw(err error) (string, bool) {
	var oe *OpaqueError
	if !errors.As(err, &oe) {
		return "", false
	}
	return oe.Err.Error(), true
}

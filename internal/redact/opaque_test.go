package redact

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestFingerprintNamesLengthAndHash(t *testing.T) {
	// SHA-256("abc") = ba7816bf...
	if got := Fingerprint("abc"); got != "3 bytes, sha256 ba7816bf" {
		t.Fatalf("Fingerprint(abc) = %q", got)
	}
	if Fingerprint("abd") == Fingerprint("abc") {
		t.Fatal("two texts share a fingerprint")
	}
}

func TestOpaqueErrorHidesItsTextButNotItsChain(t *testing.T) {
	inner := fmt.Errorf("peer said %q: %w", "the-secret-value", io.ErrUnexpectedEOF)
	err := fmt.Errorf("relay: call m: %w", Opaque("the answer was refused", inner))
	if s := err.Error(); strings.Contains(s, "secret") || !strings.Contains(s, "the answer was refused ("+Fingerprint(inner.Error())+")") {
		t.Fatalf("Error() = %q", s)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatal("errors.Is does not see through the opaque error")
	}
	if raw, ok := Raw(err); !ok || raw != inner.Error() {
		t.Fatalf("Raw = %q %v", raw, ok)
	}
	if Opaque("x", nil) != nil {
		t.Fatal("Opaque(nil) is not nil")
	}
	if _, ok := Raw(io.EOF); ok {
		t.Fatal("Raw found an opaque error in a plain one")
	}
}

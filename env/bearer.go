package env

import (
	"fmt"

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

package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/serve-zone/ingress/internal/redact"
)

// Error is a failed round trip to the server. Its text is the store's own: the operation
// and what went wrong. An answer of the server (which may echo what it was sent, the
// password included) appears only as its code, when it is one Redis defines, and the
// fingerprint of its text; so do failures whose text the store cannot vouch for.
type Error struct {
	// Op is the operation: load, store, lock, ping, ...
	Op string
	// Auth marks the server refusing the user or password (WRONGPASS, NOAUTH) or a
	// command to the user (NOPERM).
	Auth bool
	// Unreachable marks no answer at all: the connection failed or timed out.
	Unreachable bool

	text string
	err  error
}

func (e *Error) Error() string { return "redis " + e.Op + ": " + e.text }

// Unwrap returns the cause (for errors.Is and errors.As; never for printing).
func (e *Error) Unwrap() error { return e.err }

// ErrClosed is returned once Close was called.
var ErrClosed = errors.New("redisstore: the store is closed")

// serverCodes are the error codes Redis defines; the first word of an answer is shown
// only when it is one of them.
var serverCodes = map[string]bool{
	"ERR": true, "WRONGTYPE": true, "WRONGPASS": true, "NOAUTH": true, "NOPERM": true,
	"LOADING": true, "BUSY": true, "NOSCRIPT": true, "READONLY": true, "MASTERDOWN": true,
	"MISCONF": true, "EXECABORT": true, "OOM": true, "NOREPLICAS": true, "CROSSSLOT": true,
	"MOVED": true, "ASK": true, "TRYAGAIN": true, "CLUSTERDOWN": true, "NOPROTO": true,
	"UNBLOCKED": true, "NOTBUSY": true,
}

// describe turns a client error into an *Error. A cancellation is returned as it is (only
// a caller cancels: Store.result tells those apart before); a deadline met is the store's
// own (opTimeout): no answer in time.
func describe(op string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Op: op, Unreachable: true, text: "no answer in time", err: err}
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		raw := rerr.Error()
		code, _, _ := strings.Cut(strings.TrimPrefix(raw, "-"), " ")
		if !serverCodes[code] {
			code = ""
		}
		out := &Error{Op: op, err: err}
		fp := redact.Fingerprint(raw)
		switch code {
		case "WRONGPASS":
			out.Auth, out.text = true, "the server refused the user name or password (WRONGPASS; "+fp+")"
		case "NOAUTH":
			out.Auth, out.text = true, "the server wants a password and was given none (NOAUTH; "+fp+")"
		case "NOPERM":
			out.Auth, out.text = true, "the user may not run a command the store needs (NOPERM; "+fp+")"
		case "":
			out.text = "the server answered an error (" + fp + ")"
		default:
			out.text = "the server answered " + code + " (" + fp + ")"
		}
		return out
	}
	if errors.Is(err, ErrClosed) {
		return &Error{Op: op, text: "the store is closed", err: err}
	}
	if errors.Is(err, redis.ErrClosed) {
		return &Error{Op: op, text: "the client is closed", err: err}
	}
	if errors.Is(err, redis.ErrPoolTimeout) {
		return &Error{Op: op, Unreachable: true, text: "every connection to the server is busy (pool timeout)", err: err}
	}
	if t := tlsText(err); t != "" {
		return &Error{Op: op, Unreachable: true, text: t, err: err}
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// A connection's own failure: addresses and system errors, the ingress's text.
		return &Error{Op: op, Unreachable: true, text: "cannot reach the server: " + netText(err), err: err}
	}
	return &Error{Op: op, text: "unexpected failure (" + redact.Fingerprint(err.Error()) + ")", err: err}
}

// netText is the text of a connection failure: the net.OpError's, or a fixed one.
func netText(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Error()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out"
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "the connection was closed"
	}
	return "connection failed (" + redact.Fingerprint(err.Error()) + ")"
}

// tlsText describes a failed certificate check without the names the server's
// certificate carries (the server chose them); "" for another error.
func tlsText(err error) string {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var alert tls.AlertError
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &ua):
		return "TLS: the server's certificate is signed by an authority not trusted"
	case errors.As(err, &he):
		host := ""
		if he.Host != "" {
			host = " " + he.Host
		}
		return "TLS: the server's certificate is not valid for" + host
	case errors.As(err, &ci):
		switch ci.Reason {
		case x509.Expired:
			return "TLS: the server's certificate has expired or is not yet valid"
		default:
			return "TLS: the server's certificate is not valid (" + redact.Fingerprint(ci.Error()) + ")"
		}
	case errors.As(err, &alert):
		return "TLS: the server sent the alert " + alert.Error()
	case errors.As(err, &rh):
		return "TLS: the server does not speak TLS"
	}
	return ""
}

package relay

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/serve-zone/ingress/internal/redact"
)

// Text the other side chose (method names, correlation ids, error texts, close reasons,
// the keys its malformed envelopes name) never reaches a log line at info level or above,
// nor an error this package returns: a peer may echo the registration bearer there in any
// encoding, and no scrubber knows them all. Such text is named by its fingerprint
// (redact.Fingerprint: length and a short hash); at debug level a separate line holds the
// text itself, passed through Options.Redact, under the same fingerprint.

// peerString is the log field for a string the other side chose: its fingerprint (the
// text, scrubbed, goes to a debug line of its own).
func (p *Peer) peerString(key, v string) zap.Field {
	fp := redact.Fingerprint(v)
	p.debugText(key, fp, v)
	return zap.String(key, fp)
}

// methodField is the log field for a method name: as it is when this peer serves that
// method (the name is then one of ours), otherwise its fingerprint.
func (p *Peer) methodField(method string) zap.Field {
	if p.handler(method) != nil {
		return zap.String("method", method)
	}
	return p.peerString("method", method)
}

// peerViolations is the log field for the violations of a frame the other side sent:
// they name its keys, so only their count and the fingerprint of their text, as
// "2 (text of 57 bytes, sha256 1a2b3c4d)".
func (p *Peer) peerViolations(list []string) zap.Field {
	text := strings.Join(list, "; ")
	fp := redact.Fingerprint(text)
	p.debugText("violations", fp, text)
	return zap.String("violations", strconv.Itoa(len(list))+" (text of "+fp+")")
}

// peerError is the "error" log field for an error this package made or returned: its text
// holds no peer text (see opaqueSocketError); the text an *redact.OpaqueError left out
// goes to a debug line, scrubbed.
func (p *Peer) peerError(err error) zap.Field {
	if err == nil {
		return zap.Skip()
	}
	if raw, ok := redact.Raw(err); ok {
		p.debugText("error", redact.Fingerprint(raw), raw)
	}
	return zap.String("error", err.Error())
}

// debugText logs, at debug level only, text the other side chose, scrubbed, under its
// fingerprint fp.
func (p *Peer) debugText(key, fp, v string) {
	if ce := p.log.Check(zapcore.DebugLevel, "relay-sent text"); ce != nil {
		ce.Write(zap.String("field", key), zap.String("fingerprint", fp), zap.String("text", p.opts.Redact(v)))
	}
}

// opaqueSocketError wraps an error of the socket (a read or a write) so that its text holds
// no close reason: the status code of a close frame and the system error number are ours
// to name, the rest is only fingerprinted. errors.Is and errors.As still see err.
func opaqueSocketError(op string, err error) error {
	if err == nil {
		return nil
	}
	what := "relay: socket " + op + " failed"
	var errno syscall.Errno
	switch {
	case websocket.CloseStatus(err) != -1:
		what = "relay: the peer closed the socket with status " + strconv.Itoa(int(websocket.CloseStatus(err))) +
			" (" + websocket.CloseStatus(err).String() + ")"
	case errors.Is(err, websocket.ErrMessageTooBig):
		what = "relay: socket " + op + " failed: message over the size limit"
	case errors.As(err, &errno):
		what += ": " + errno.Error()
	}
	return redact.Opaque(what, err)
}

// dialError is Dial's error: the origin (the operator's) and what failed, never text the
// server chose. A handshake that got an HTTP answer is named by its status code (the
// library's message quotes the answer's fields); a TLS verification failure by its kind
// (its message quotes the names of the server's certificate); a system error by its
// number. Anything else is fingerprinted; errors.Is and errors.As still see err.
func dialError(origin string, resp *http.Response, err error) error {
	what := "relay: dial " + origin
	var (
		verify   *tls.CertificateVerificationError
		hostname x509.HostnameError
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		errno    syscall.Errno
		dns      *net.DNSError
	)
	switch {
	case resp != nil:
		what += ": handshake answered " + strconv.Itoa(resp.StatusCode)
	case errors.As(err, &hostname):
		what += ": the relay's TLS certificate is not valid for " + hostname.Host
	case errors.As(err, &unknown):
		what += ": the relay's TLS certificate is signed by an unknown authority"
	case errors.As(err, &invalid):
		what += ": the relay's TLS certificate is invalid (reason " + strconv.Itoa(int(invalid.Reason)) + ")"
	case errors.As(err, &verify):
		what += ": the relay's TLS certificate failed verification"
	case errors.As(err, &dns):
		what += ": " + dns.Err + " (" + dns.Name + ")"
	case errors.As(err, &errno):
		what += ": " + errno.Error()
	case errors.Is(err, context.DeadlineExceeded):
		what += ": " + context.DeadlineExceeded.Error()
	case errors.Is(err, context.Canceled):
		what += ": " + context.Canceled.Error()
	default:
		what += ": failed"
	}
	return redact.Opaque(what, err)
}

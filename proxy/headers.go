package proxy

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/serve-zone/ingress/internal/ascii"
	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"golang.org/x/net/http/httpguts"
)

// Shared, never-modified header values (assigning them avoids a slice per request).
var (
	valUpgrade   = []string{"Upgrade"}
	valWebSocket = []string{"websocket"}
)

// removeHopByHop deletes the hop-by-hop headers of h, including those its Connection
// header names (h1wire.EachConnectionOption: never Content-Length, Transfer-Encoding or
// Host; a request naming one is refused before, and a response's framing is net/http's
// to write). It reports whether a TE header asked for trailers.
func removeHopByHop(h http.Header) (teTrailers bool) {
	// TE first: clients name it in Connection too (RFC 9110 §10.1.4).
	for _, v := range h["Te"] {
		if hasToken(v, "trailers") {
			teTrailers = true
		}
	}
	for _, v := range h["Connection"] {
		h1wire.EachConnectionOption(v, h.Del)
	}
	for _, k := range h1wire.HopByHop {
		delete(h, k)
	}
	return teTrailers
}

// hasToken reports whether the comma-separated list v contains tok (ASCII
// case-insensitive), ignoring parameters (TE: trailers;q=1), which
// httpguts.HeaderValuesContainsToken does not.
func hasToken(v, tok string) bool {
	for v != "" {
		var t string
		t, v, _ = strings.Cut(v, ",")
		if i := strings.IndexByte(t, ';'); i >= 0 {
			t = t[:i]
		}
		if ascii.EqualFold(strings.TrimSpace(t), tok) {
			return true
		}
	}
	return false
}

// isWebSocketUpgrade reports an HTTP/1.1 WebSocket upgrade request (RFC 6455 4.1).
func isWebSocketUpgrade(r *http.Request) bool {
	return r.ProtoMajor == 1 && r.Method == http.MethodGet &&
		httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade") &&
		httpguts.HeaderValuesContainsToken(r.Header["Upgrade"], "websocket")
}

// forwardedFor is what the forwarding headers state about one request.
type forwardedFor struct {
	clientIP string // without brackets or port
	host     string // the request's Host as received
	https    bool
	trusted  bool // the client is a trusted proxy: extend its headers instead of replacing
}

// clientIP returns the address part of a RemoteAddr ("1.2.3.4:5" or "[::1]:5") without
// allocating.
func clientIP(remoteAddr string) string {
	host := remoteAddr
	if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.IndexByte(host[i+1:], ']') < 0 {
		host = host[:i]
	}
	host = strings.TrimPrefix(host, "[")
	return strings.TrimSuffix(host, "]")
}

func (s *Server) isTrusted(ip string) bool {
	if len(s.trusted) == 0 {
		return false
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range s.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// The forwarding-field policy, decided here once for every front-end (outhead.go's
// appendHead calls appendForwarding, whatever representation the request's fields came
// in). From an untrusted client, X-Forwarded-For, -Proto, -Host, Forwarded and X-Real-Ip
// are dropped (requestFieldRules) and the ingress's own written; from a trusted proxy
// (--trusted-proxies), X-Forwarded-For and Forwarded are extended with this hop, and its
// X-Forwarded-Proto, -Host and X-Real-Ip kept (written by us when absent). Look-alikes
// spelled with '_' (X_Forwarded_For) are never forwarded (h1wire.ForwardingLookalike).

// keepsClientForwarding reports whether the client's own forwarding fields survive.
func (f *forwardedFor) keepsClientForwarding() bool { return f.trusted }

// fieldSource is a request's fields as appendForwarding reads them.
type fieldSource interface {
	// hasKind reports a field of kind k (h1wire.Kind*).
	hasKind(k uint8) bool
	// appendValues appends the values of the fields of kind k, each followed by ", ".
	appendValues(b []byte, k uint8) []byte
}

// appendForwarding appends this hop's forwarding fields to an outgoing head, after the
// client's own were dropped or kept as keepsClientForwarding says (src holds them).
func appendForwarding[S fieldSource](b []byte, src S, f forwardedFor) []byte {
	trusted := f.keepsClientForwarding()
	b = append(b, "X-Forwarded-For: "...)
	if trusted {
		b = src.appendValues(b, h1wire.KindXFF)
	}
	b = append(b, f.clientIP...)
	b = append(b, "\r\nForwarded: "...)
	if trusted {
		b = src.appendValues(b, h1wire.KindForwarded)
	}
	b = appendForwardedElement(b, f.clientIP, f.host, f.https)
	b = append(b, "\r\n"...)
	if !trusted || !src.hasKind(h1wire.KindXFProto) {
		if f.https {
			b = append(b, "X-Forwarded-Proto: https\r\n"...)
		} else {
			b = append(b, "X-Forwarded-Proto: http\r\n"...)
		}
	}
	if !trusted || !src.hasKind(h1wire.KindXFHost) {
		b = append(b, "X-Forwarded-Host: "...)
		b = append(b, f.host...)
		b = append(b, "\r\n"...)
	}
	return b
}

// appendForwardedElement appends one RFC 7239 element for a request, the one spelling
// of it on every path: `for=` the client's address (an IPv6 one quoted in brackets),
// `host=` the Host as received (quoted unless it is a token), `proto=` http or https.
func appendForwardedElement[T string | []byte](b []byte, ip string, host T, https bool) []byte {
	b = append(b, "for="...)
	if strings.IndexByte(ip, ':') >= 0 {
		b = append(b, `"[`...)
		b = append(b, ip...)
		b = append(b, `]"`...)
	} else {
		b = append(b, ip...)
	}
	b = append(b, ";host="...)
	if isToken(host) {
		b = append(b, host...)
	} else {
		b = appendQuoted(b, host)
	}
	if https {
		return append(b, ";proto=https"...)
	}
	return append(b, ";proto=http"...)
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken[T string | []byte](s T) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !h1wire.Tchar[s[i]] {
			return false
		}
	}
	return true
}

// appendQuoted appends s as a quoted-string, escaping '"' and '\\'.
func appendQuoted[T string | []byte](b []byte, s T) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

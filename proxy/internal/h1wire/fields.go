package h1wire

import (
	"bytes"

	"github.com/serve-zone/ingress/internal/ascii"
)

// KindHandoff marks a request field that sends the connection to net/http.
const KindHandoff uint8 = 255

func requestFieldKind(name []byte) uint8 {
	switch len(name) {
	case 2:
		if ascii.EqualLower(name, "te") {
			return KindTE
		}
	case 4:
		if ascii.EqualLower(name, "host") {
			return KindHost
		}
	case 6:
		if ascii.EqualLower(name, "expect") {
			return KindHandoff
		}
	case 7:
		if ascii.EqualLower(name, "upgrade") {
			return KindHandoff
		}
	case 9:
		if ascii.EqualLower(name, "forwarded") {
			return KindForwarded
		}
	case 10:
		switch {
		case ascii.EqualLower(name, "connection"):
			return KindConnection
		}
	}
	switch {
	case ascii.EqualLower(name, "content-length"):
		return KindContentLength
	case ascii.EqualLower(name, "transfer-encoding"):
		return KindTransferEncoding
	case ascii.EqualLower(name, "x-forwarded-for"):
		return KindXFF
	case ascii.EqualLower(name, "x-forwarded-proto"):
		return KindXFProto
	case ascii.EqualLower(name, "x-forwarded-host"):
		return KindXFHost
	case ascii.EqualLower(name, "x-real-ip"):
		return KindXRealIP
	case IsHopByHop(name):
		return KindDrop // the rest of the one hop-by-hop list (HopByHop)
	case bytes.IndexByte(name, '_') >= 0 && ForwardingLookalike(name):
		return KindDrop
	}
	return KindOther
}

// ForwardingLookalike reports a field name that spells a forwarding field with '_' for
// '-' (X_Forwarded_For): CGI and WSGI targets read both spellings as one variable, so a
// client could forge what the ingress writes. Such fields are never forwarded (nginx
// drops every name with '_' by default).
func ForwardingLookalike[T string | []byte](name T) bool {
	for _, f := range [...]string{"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-real-ip"} {
		if len(name) != len(f) {
			continue
		}
		same := true
		for i := 0; i < len(f) && same; i++ {
			c := name[i]
			switch {
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			case c == '_':
				c = '-'
			}
			same = c == f[i]
		}
		if same {
			return true
		}
	}
	return false
}

func responseFieldKind(name []byte) uint8 {
	switch len(name) {
	case 4:
		if ascii.EqualLower(name, "date") {
			return KindDate
		}
	case 7:
		switch {
		case ascii.EqualLower(name, "alt-svc"):
			return KindAltSvc
		case ascii.EqualLower(name, "trailer"):
			// The one exception to the hop-by-hop list: chunked bodies, trailers
			// included, pass through verbatim, so the field announcing them stays
			// (net/http's path drops it because net/http writes its own).
			return KindOther
		}
	case 10:
		switch {
		case ascii.EqualLower(name, "connection"):
			return KindConnection
		case ascii.EqualLower(name, "keep-alive"):
			return KindKeepAlive
		}
	case 14:
		if ascii.EqualLower(name, "content-length") {
			return KindContentLength
		}
	case 17:
		if ascii.EqualLower(name, "transfer-encoding") {
			return KindTransferEncoding
		}
	}
	if IsHopByHop(name) {
		return KindDrop // the rest of the one hop-by-hop list (HopByHop)
	}
	return KindOther
}

// dropConnectionNamed marks the fields that a Connection field names as hop-by-hop
// (EachConnectionOption).
func dropConnectionNamed(head []byte, fields []Field) {
	for i := range fields {
		if fields[i].Kind != KindConnection {
			continue
		}
		EachConnectionOption(fields[i].Value(head), func(name []byte) {
			for j := range fields {
				if fields[j].Kind != KindConnection && ascii.EqualFold(fields[j].Name(head), name) {
					fields[j].Kind = KindDrop
				}
			}
		})
	}
}

// EachConnectionOption calls fn with each field name that a Connection value v asks to
// remove, the one rule of it on every path (RFC 9110 §7.6.1): every comma-separated
// option, whitespace trimmed, but close and keep-alive, and never a field that frames
// or routes the message (ProtectedField): what frames and routes a forwarded message is
// derived from what is forwarded, never removed by an option (a request naming one is
// refused: NamesProtectedField; a response naming one is framed by us all the same).
func EachConnectionOption[T string | []byte](v T, fn func(name T)) {
	for len(v) > 0 {
		i := 0
		for i < len(v) && v[i] != ',' {
			i++
		}
		t := v[:i]
		if i < len(v) {
			i++
		}
		v = v[i:]
		for len(t) > 0 && (t[0] == ' ' || t[0] == '\t') {
			t = t[1:]
		}
		for len(t) > 0 && (t[len(t)-1] == ' ' || t[len(t)-1] == '\t') {
			t = t[:len(t)-1]
		}
		if len(t) > 0 && !ascii.EqualLower(t, "close") && !ascii.EqualLower(t, "keep-alive") && !ProtectedField(t) {
			fn(t)
		}
	}
}

// ProtectedField reports a field name that a Connection option never removes: the
// framing fields and Host.
func ProtectedField[T string | []byte](name T) bool {
	return ascii.EqualLower(name, "content-length") || ascii.EqualLower(name, "transfer-encoding") || ascii.EqualLower(name, "host")
}

// HopByHop is the one list of hop-by-hop fields (RFC 9110 §7.6.1 plus the usual proxy
// ones), in canonical form: the proxy removes them in both directions on every path
// (the fast path by classifying fields with IsHopByHop). Upgrade and Connection are
// restored for a WebSocket upgrade.
var HopByHop = [...]string{
	"Connection",
	"Keep-Alive",
	"Proxy-Connection",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer", // net/http writes the Trailer header itself from Request/Response.Trailer
	"Transfer-Encoding",
	"Upgrade",
	"Http2-Settings",
}

// IsHopByHop reports whether name is in HopByHop (ASCII case-insensitive).
func IsHopByHop[T string | []byte](name T) bool {
	for _, h := range HopByHop {
		if ascii.EqualFold(name, h) {
			return true
		}
	}
	return false
}

// RequestFieldKind classifies a request field name (any case) as the request parser
// does, for front-ends that parse requests of their own (HTTP/2).
func RequestFieldKind(name []byte) uint8 { return requestFieldKind(name) }

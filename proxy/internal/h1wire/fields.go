package h1wire

import "bytes"

// KindHandoff marks a request field that sends the connection to net/http.
const KindHandoff uint8 = 255

func requestFieldKind(name []byte) uint8 {
	switch len(name) {
	case 2:
		if eqFold(name, "te") {
			return KindTE
		}
	case 4:
		if eqFold(name, "host") {
			return KindHost
		}
	case 6:
		if eqFold(name, "expect") {
			return KindHandoff
		}
	case 7:
		if eqFold(name, "upgrade") {
			return KindHandoff
		}
	case 9:
		if eqFold(name, "forwarded") {
			return KindForwarded
		}
	case 10:
		switch {
		case eqFold(name, "connection"):
			return KindConnection
		}
	}
	switch {
	case eqFold(name, "content-length"):
		return KindContentLength
	case eqFold(name, "transfer-encoding"):
		return KindTransferEncoding
	case eqFold(name, "x-forwarded-for"):
		return KindXFF
	case eqFold(name, "x-forwarded-proto"):
		return KindXFProto
	case eqFold(name, "x-forwarded-host"):
		return KindXFHost
	case eqFold(name, "x-real-ip"):
		return KindXRealIP
	case IsHopByHop(name):
		return KindDrop // the rest of the one hop-by-hop list (headers.go)
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
		if eqFold(name, "date") {
			return KindDate
		}
	case 7:
		switch {
		case eqFold(name, "alt-svc"):
			return KindAltSvc
		case eqFold(name, "trailer"):
			// The one exception to the hop-by-hop list: chunked bodies, trailers
			// included, pass through verbatim, so the field announcing them stays
			// (net/http's path drops it because net/http writes its own).
			return KindOther
		}
	case 10:
		switch {
		case eqFold(name, "connection"):
			return KindConnection
		case eqFold(name, "keep-alive"):
			return KindKeepAlive
		}
	case 14:
		if eqFold(name, "content-length") {
			return KindContentLength
		}
	case 17:
		if eqFold(name, "transfer-encoding") {
			return KindTransferEncoding
		}
	}
	if IsHopByHop(name) {
		return KindDrop // the rest of the one hop-by-hop list (headers.go)
	}
	return KindOther
}

// dropConnectionNamed marks the fields that a Connection field names as hop-by-hop,
// except the framing fields and Host: what frames and routes a forwarded message is
// derived from what is forwarded, never removed by an option (a request naming one was
// refused already; a response naming one is framed by us all the same).
func dropConnectionNamed(head []byte, fields []Field) {
	for i := range fields {
		if fields[i].Kind != KindConnection {
			continue
		}
		v := fields[i].Value(head)
		for len(v) > 0 {
			var tok []byte
			tok, v, _ = bytes.Cut(v, []byte{','})
			tok = trimOWS(tok)
			if len(tok) == 0 || eqFold(tok, "close") || eqFold(tok, "keep-alive") {
				continue
			}
			for j := range fields {
				switch fields[j].Kind {
				case KindConnection, KindContentLength, KindTransferEncoding, KindHost:
					continue
				}
				if eqFoldBytes(fields[j].Name(head), tok) {
					fields[j].Kind = KindDrop
				}
			}
		}
	}
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
		if eqFoldBytes(name, h) {
			return true
		}
	}
	return false
}

// RequestFieldKind classifies a request field name (any case) as the request parser
// does, for front-ends that parse requests of their own (HTTP/2).
func RequestFieldKind(name []byte) uint8 { return requestFieldKind(name) }

package h2

import (
	"errors"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"
)

// Request is a stream's validated request head.
type Request struct {
	Method, Scheme, Authority, Path string
	// Protocol is :protocol of an extended CONNECT (RFC 8441), else "".
	Protocol string
	// Fields are the regular fields in order, names lower case, without host (folded
	// into Authority) and with cookie crumbs joined into one field.
	Fields []hpack.HeaderField
	// ContentLength is the request's content-length, -1 when it has none.
	ContentLength int64
	// NoBody: END_STREAM came with the head (the request has no body at all).
	NoBody bool
	// HeaderBytes is the decoded size of the head (names and values, pseudo-headers
	// included), for accounting.
	HeaderBytes int64
}

// Get returns the first value of the regular field name (lower case).
func (r *Request) Get(name string) (string, bool) {
	for i := range r.Fields {
		if r.Fields[i].Name == name {
			return r.Fields[i].Value, true
		}
	}
	return "", false
}

var (
	errMissingPseudo  = errors.New("missing or empty required pseudo-header")
	errBadPseudo      = errors.New("pseudo-header not allowed here")
	errConnField      = errors.New("connection-specific header field")
	errBadTE          = errors.New("te other than trailers")
	errBadCL          = errors.New("invalid content-length")
	errHostMismatch   = errors.New(":authority and host disagree")
	errBadPath        = errors.New("invalid :path")
	errNoConnectProto = errors.New("extended CONNECT not enabled")
)

// parseRequest validates a request head decoded by headerFragment (which already refused
// invalid names and values, unknown, repeated and misplaced pseudo-headers) against
// RFC 9113 §8.2-8.5 and RFC 8441, and builds r. fields is the connection's, reused for
// its next header block: r.Fields gets an array of its own (the stream's, kept when the
// stream object is reused), r's strings are hpack's and outlive fields.
// Any error is a stream error PROTOCOL_ERROR.
func parseRequest(fields []hpack.HeaderField, connectProto bool, r *Request) error {
	var host string
	var hasHost, hasAuthority bool
	r.ContentLength = -1
	cookies, regular := 0, 0
	for _, f := range fields {
		r.HeaderBytes += int64(len(f.Name) + len(f.Value))
		if f.Name != "host" && !strings.HasPrefix(f.Name, ":") {
			regular++
		}
		if strings.HasPrefix(f.Name, ":") {
			switch f.Name {
			case ":method":
				r.Method = f.Value
			case ":scheme":
				r.Scheme = f.Value
			case ":authority":
				r.Authority, hasAuthority = f.Value, true
			case ":path":
				r.Path = f.Value
				if f.Value == "" {
					return errBadPath
				}
			case ":protocol":
				r.Protocol = f.Value
			default: // :status
				return errBadPseudo
			}
			continue
		}
		switch f.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return errConnField
		case "te":
			if f.Value != "trailers" {
				return errBadTE
			}
		case "host":
			if hasHost && f.Value != host {
				return errHostMismatch
			}
			host, hasHost = f.Value, true
			continue
		case "content-length":
			v, err := parseContentLength(f.Value)
			if err != nil || (r.ContentLength >= 0 && v != r.ContentLength) {
				return errBadCL
			}
			r.ContentLength = v
		case "cookie":
			cookies++
		}
	}
	if hasHost {
		if !hasAuthority {
			r.Authority = host
		} else if !sameAuthority(host, r.Authority, r.Scheme) {
			return errHostMismatch
		}
	}
	if r.Authority != "" && !httpguts.ValidHostHeader(r.Authority) {
		return errBadPseudo
	}
	switch {
	case r.Method == "":
		return errMissingPseudo
	case r.Method == "CONNECT" && r.Protocol == "":
		if r.Scheme != "" || r.Path != "" || r.Authority == "" {
			return errMissingPseudo
		}
	case r.Protocol != "":
		if !connectProto {
			return errNoConnectProto
		}
		if r.Method != "CONNECT" || r.Scheme == "" || r.Path == "" || r.Authority == "" {
			return errMissingPseudo
		}
	default:
		if r.Scheme == "" || r.Path == "" {
			return errMissingPseudo
		}
		if r.Path[0] != '/' && !(r.Path == "*" && r.Method == "OPTIONS") {
			return errBadPath
		}
		// A path a request line could not carry either (a broken %-escape) is refused
		// as net/http's server refuses it, not passed on to be judged by a target.
		if r.Path != "*" && !validRequestURI(r.Path) {
			return errBadPath
		}
	}
	// The regular fields but host, the cookie crumbs in one field.
	if cookies > 1 {
		regular -= cookies - 1
	}
	r.Fields = r.Fields[:0] // a reused stream's array (reuse.go)
	if cap(r.Fields) < regular {
		r.Fields = make([]hpack.HeaderField, 0, regular)
	}
	var cookie []string
	for _, f := range fields {
		if strings.HasPrefix(f.Name, ":") || f.Name == "host" {
			continue
		}
		if f.Name == "cookie" && cookies > 1 {
			if cookie == nil {
				cookie = make([]string, 0, cookies)
				r.Fields = append(r.Fields, hpack.HeaderField{Name: "cookie"})
			}
			cookie = append(cookie, f.Value)
			continue
		}
		r.Fields = append(r.Fields, hpack.HeaderField{Name: f.Name, Value: f.Value})
	}
	if cookie != nil {
		for i := range r.Fields {
			if r.Fields[i].Name == "cookie" {
				r.Fields[i].Value = strings.Join(cookie, "; ") // RFC 9113 §8.2.3
				break
			}
		}
	}
	return nil
}

// sameAuthority compares host and :authority after scheme-based normalization (RFC 9113
// §8.3.1, RFC 3986 §6.2.3): case-insensitive, an empty port or the scheme's default port
// left out.
func sameAuthority(a, b, scheme string) bool {
	return strings.EqualFold(normalAuthority(a, scheme), normalAuthority(b, scheme))
}

func normalAuthority(a, scheme string) string {
	if i := strings.LastIndexByte(a, ':'); i >= 0 && !strings.Contains(a[i:], "]") {
		switch port := a[i+1:]; {
		case port == "", port == "80" && scheme == "http", port == "443" && scheme == "https":
			return a[:i]
		}
	}
	return a
}

// parseTrailers checks a trailer block: no pseudo-headers, no connection-specific fields.
func parseTrailers(fields []hpack.HeaderField) ([]hpack.HeaderField, int64, error) {
	var n int64
	out := make([]hpack.HeaderField, 0, len(fields))
	for _, f := range fields {
		if strings.HasPrefix(f.Name, ":") {
			return nil, 0, errBadPseudo
		}
		switch f.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te":
			return nil, 0, errConnField
		}
		n += int64(len(f.Name) + len(f.Value))
		out = append(out, hpack.HeaderField{Name: f.Name, Value: f.Value})
	}
	return out, n, nil
}

func parseContentLength(v string) (int64, error) {
	if v == "" || len(v) > 18 {
		return 0, errBadCL
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, errBadCL
		}
	}
	return strconv.ParseInt(v, 10, 64)
}

// validRequestURI reports whether url.ParseRequestURI accepts p, a path starting with
// '/', without its allocations: no control byte anywhere, and only complete %-escapes
// before the query (TestValidRequestURI holds it to url.ParseRequestURI).
func validRequestURI(p string) bool {
	inPath := true
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c < 0x20 || c == 0x7f:
			return false
		case c == '?':
			inPath = false
		case c == '%' && inPath:
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return false
			}
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

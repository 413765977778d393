package h1wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// h1RequestSeeds are valid and tricky request heads for FuzzH1RequestSubset: some the
// fast path must accept, most it must refuse (and leave to net/http).
var h1RequestSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
	"POST /submit?x=1 HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello",
	"GET /many HTTP/1.1\r\nHost: a.test:8080\r\nUser-Agent: t/1\r\nAccept: */*\r\nAccept-Encoding: gzip, br\r\nCookie: a=1\r\nX-A: 1\r\nx-a: 2\r\nX-Empty:\r\nPragma: no-cache\r\nTE: trailers\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\n\r\n",
	"GET /1 HTTP/1.1\r\nHost: a.test\r\n\r\nGET /2 HTTP/1.1\r\nHost: a.test\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a.test\r\nX-Fold: a\r\n b\r\n\r\n",
	"GET / HTTP/1.1\nHost: a.test\n\n",
	"GET / HTTP/1.1\r\nHost: a.test\nX: y\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
	"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
	"GET / HTTP/1.1\r\nX: y\r\n\r\n",
	"GET / HTTP/1.0\r\nHost: a.test\r\n\r\n",
	"GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: a.test\r\n\r\n",
	"GET /a%zz HTTP/1.1\r\nHost: a.test\r\n\r\n",
	"GET /a?q=%zz HTTP/1.1\r\nHost: a.test\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a.test\r\nX-Tab:\ta\tb\t\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a.test\r\nX-High: caf\xc3\xa9 \xff\x80\r\n\r\n",
	"GET / HTTP/1.1\r\nHost : a.test\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a.test\r\n: x\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: +5\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a.test\r\nExpect: 100-continue\r\n\r\n",
	// Found while fuzzing (by hand, see the report): net/http's Connection token match
	// neither strips ";params" nor trims Unicode spaces; parseRequest does both, so it
	// decides to close where net/http keeps the connection.
	"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close;x\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\xc2\xa0\r\n\r\n",
}

// FuzzH1RequestSubset checks the fast path's promise (request.go): whatever ParseRequest
// accepts, net/http reads the same way. If it ever accepted a head that net/http reads
// differently (another length, another host, another close decision), the proxy and the
// standard library would disagree about a request: the stuff of request smuggling.
func FuzzH1RequestSubset(f *testing.F) {
	for _, s := range h1RequestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fields := make([]Field, MaxFields)
		var r Request
		// Any bytes at all: no panic (the result does not matter).
		ParseRequest(&r, data, fields)

		// The property, on what the server really passes: one complete head.
		n := HeadEnd(data, 0)
		if n < 0 {
			return
		}
		head := slices.Clone(data[:n])
		if ParseRequest(&r, head, fields) != Fast {
			return
		}
		if !bytes.Equal(head, data[:n]) {
			t.Fatalf("parseRequest modified its input")
		}
		checkSameAsNetHTTP(t, &r, head)
	})
}

// checkSameAsNetHTTP fails t unless http.ReadRequest reads head as r says.
func checkSameAsNetHTTP(t *testing.T, r *Request, head []byte) {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		t.Fatalf("parseRequest accepted %q, net/http refuses it: %v", head, err)
	}
	if req.Method != string(r.Method()) {
		t.Errorf("method %q, net/http %q", r.Method(), req.Method)
	}
	if req.RequestURI != string(r.Target()) {
		t.Errorf("target %q, net/http %q", r.Target(), req.RequestURI)
	}
	if req.ProtoMajor != 1 || req.ProtoMinor != 1 {
		t.Errorf("net/http reads version %d.%d", req.ProtoMajor, req.ProtoMinor)
	}
	if req.Host != string(r.Host) {
		t.Errorf("host %q, net/http %q", r.Host, req.Host)
	}
	if req.ContentLength != r.ContentLength {
		t.Errorf("content length %d, net/http %d", r.ContentLength, req.ContentLength)
	}
	if req.Close != r.ConnClose {
		t.Errorf("connClose %v, net/http Close %v", r.ConnClose, req.Close)
	}
	// Field values, per canonical name, in order. Host is compared above (net/http
	// keeps it out of Header's meaning; we count it).
	ours := map[string][]string{}
	hosts := 0
	for i := range r.Fields {
		f := &r.Fields[i]
		if f.Kind == KindHost {
			hosts++
			continue
		}
		k := textproto.CanonicalMIMEHeaderKey(string(f.Name(head)))
		ours[k] = append(ours[k], string(f.Value(head)))
	}
	if hosts != 1 {
		t.Errorf("%d fields classified as Host", hosts)
	}
	for k, v := range ours {
		if !slices.Equal(v, req.Header[k]) {
			t.Errorf("field %s: values %q, net/http %q", k, v, req.Header[k])
		}
	}
	for k, v := range req.Header {
		if _, ok := ours[k]; ok || k == "Host" {
			continue
		}
		// net/http adds Cache-Control: no-cache for Pragma: no-cache (fixPragmaCacheControl).
		if k == "Cache-Control" && slices.Equal(v, []string{"no-cache"}) && slices.Equal(req.Header["Pragma"][:1], []string{"no-cache"}) {
			continue
		}
		t.Errorf("net/http sees field %s %q that parseRequest does not", k, v)
	}
	if t.Failed() {
		t.Logf("head: %q", head)
	}
}

// TestParseRequestSubset pins the accept/refuse decision for the seed heads and a few
// more, so a change to the subset is a visible decision, not a fuzzing surprise.
func TestParseRequestSubset(t *testing.T) {
	const F, O, B = Fast, Other, Bad
	tests := []struct {
		name string
		head string
		want Verdict
	}{
		{"simple GET", h1RequestSeeds[0], F},
		{"POST with Content-Length", "POST /submit?x=1 HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\n", F},
		{"many fields", h1RequestSeeds[2], F},
		{"Connection close", h1RequestSeeds[3], F},
		{"obs-fold", h1RequestSeeds[6], O},
		{"bare LF", "GET / HTTP/1.1\nHost: a.test\r\n\r\n", B},
		{"bare LF in a field", h1RequestSeeds[8], B},
		{"bare LF after obs-fold", "GET / HTTP/1.1\r\nHost: a.test\r\nX: a\r\n b\nY: c\r\n\r\n", B},
		{"CL and TE", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", B},
		{"TE and CL", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", B},
		{"19-digit CL and TE", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0000000000000000005\r\nTransfer-Encoding: chunked\r\n\r\n", B},
		{"TE alone", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n", O},
		{"duplicate equal CL", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", O},
		{"duplicate differing CL", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", B},
		{"CL with leading zeros", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 003\r\n\r\n", F},
		{"hex CL", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0x3\r\n\r\n", B},
		{"empty CL", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: \r\n\r\n", B},
		{"duplicate Host", h1RequestSeeds[11], B},
		{"missing Host", h1RequestSeeds[12], B},
		{"empty Host", "GET / HTTP/1.1\r\nHost: \r\n\r\n", O},
		{"bad Host byte", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", B},
		{"userinfo in Host", "GET / HTTP/1.1\r\nHost: user@a.test\r\n\r\n", B},
		{"non-numeric port", "GET / HTTP/1.1\r\nHost: b.test:evil.example\r\n\r\n", B},
		{"two colons", "GET / HTTP/1.1\r\nHost: b.test:1:2\r\n\r\n", B},
		{"numeric port", "GET / HTTP/1.1\r\nHost: b.test:8080\r\n\r\n", F},
		{"empty port", "GET / HTTP/1.1\r\nHost: b.test:\r\n\r\n", F},
		{"IPv6 literal with port", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", F},
		{"Connection names Content-Length", "POST / HTTP/1.1\r\nHost: a.test\r\nConnection: Content-Length\r\nContent-Length: 3\r\n\r\n", B},
		{"Connection names content-length in a list", "POST / HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive, content-length\r\nContent-Length: 3\r\n\r\n", B},
		{"Connection names Transfer-Encoding", "POST / HTTP/1.1\r\nHost: a.test\r\nConnection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n", B},
		{"Connection names Host", "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: Host\r\n\r\n", B},
		{"Connection names Host after Expect", "GET / HTTP/1.1\r\nExpect: 100-continue\r\nHost: a.test\r\nConnection: Host\r\n\r\n", B},
		{"Connection names X-Forwarded-For", "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: X-Forwarded-For\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n", F},
		{"HTTP/1.0", h1RequestSeeds[13], O},
		{"HTTP/2.0 line", "GET / HTTP/2.0\r\nHost: a.test\r\n\r\n", O},
		{"h2c preface", "PRI * HTTP/2.0\r\n\r\n", O},
		{"absolute-form", h1RequestSeeds[14], O},
		{"asterisk", h1RequestSeeds[15], O},
		{"bad escape in path", h1RequestSeeds[16], O},
		{"bad escape at path end", "GET /a% HTTP/1.1\r\nHost: a.test\r\n\r\n", O},
		{"bad escape in query", h1RequestSeeds[17], F}, // net/http does not check the query
		{"tabs in value", h1RequestSeeds[18], F},
		{"high bytes in value", h1RequestSeeds[19], F},
		{"high bytes in target", "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a.test\r\n\r\n", O},
		{"control byte in target", "GET /a\x01 HTTP/1.1\r\nHost: a.test\r\n\r\n", B},
		{"space before colon", h1RequestSeeds[20], B},
		{"empty name", h1RequestSeeds[21], B},
		{"signed CL", h1RequestSeeds[22], B},
		{"Expect", h1RequestSeeds[23], O},
		{"Upgrade", "GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n\r\n", O},
		{"DEL in value", "GET / HTTP/1.1\r\nHost: a.test\r\nX: a\x7fb\r\n\r\n", B},
		{"NUL in value", "GET / HTTP/1.1\r\nHost: a.test\r\nX: a\x00b\r\n\r\n", B},
		{"CR in value", "GET / HTTP/1.1\r\nHost: a.test\r\nX: a\rb\r\n\r\n", B},
		{"lowercase version", "GET / http/1.1\r\nHost: a.test\r\n\r\n", B},
		{"two spaces", "GET  / HTTP/1.1\r\nHost: a.test\r\n\r\n", B},
		{"no method", " / HTTP/1.1\r\nHost: a.test\r\n\r\n", B},
		{"too short", "X\r\n\r\n", B},
		{"no version", "GET /\r\n\r\n", B},
		{"19-digit CL", "GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1000000000000000000\r\n\r\n", O},
		{"101 fields", "GET / HTTP/1.1\r\nHost: a.test\r\n" + strings.Repeat("X: y\r\n", 100) + "\r\n", O},
		{"101 fields, Host last", "GET / HTTP/1.1\r\n" + strings.Repeat("X: y\r\n", 100) + "Host: a.test\r\n\r\n", O},
		{"100 fields", "GET / HTTP/1.1\r\nHost: a.test\r\n" + strings.Repeat("X: y\r\n", 99) + "\r\n", F},
	}
	fields := make([]Field, MaxFields)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r Request
			head := []byte(tc.head)
			if n := HeadEnd(head, 0); n >= 0 && n != len(head) {
				t.Fatalf("test head is not exactly one head (%d of %d)", n, len(head))
			}
			got := ParseRequest(&r, head, fields)
			if got != tc.want {
				t.Fatalf("parseRequest = %d, want %d (0 fast, 1 other, 2 bad)", got, tc.want)
			}
			switch got {
			case Fast:
				checkSameAsNetHTTP(t, &r, head)
			case Bad:
				checkRefusalJustified(t, head)
			}
		})
	}
}

// checkRefusalJustified fails t unless net/http also refuses head, or head is one of
// the cases the fast path refuses on purpose where net/http is lenient: a bare line end,
// Connection naming a framing field or Host, Content-Length beside Transfer-Encoding, a
// non-numeric Host port.
func checkRefusalJustified(t *testing.T, head []byte) {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return
	}
	switch {
	case HasBareLineEnd(head),
		len(req.TransferEncoding) > 0 && bytes.Contains(bytes.ToLower(head), []byte("content-length")),
		!httpguts.ValidHostHeader(req.Host), !ValidHostPort(req.Host):
		return
	}
	for _, v := range req.Header["Connection"] {
		if NamesProtectedField([]byte(v)) {
			return
		}
	}
	if req.ProtoAtLeast(1, 1) && len(req.Header.Values("Host")) == 0 && req.Host == "" {
		return // net/http's ReadRequest leaves the missing-Host check to the server
	}
	if _, dup := req.Header["Host"]; dup {
		return // a second Host (net/http's server refuses it)
	}
	t.Errorf("refused %q, which net/http reads as %s %s", head, req.Method, req.RequestURI)
}

// TestParseRequestFields checks what the forwarding code relies on: field kinds
// (hop-by-hop ones dropped, Connection-named ones too), connClose, teTrailers and
// hasProxyFields.
func TestParseRequestFields(t *testing.T) {
	head := []byte("GET /p HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n" +
		"Keep-Alive: 5\r\nProxy-Connection: keep-alive\r\nTE: gzip, trailers;q=1\r\nX-Forwarded-For: 1.2.3.4\r\n" +
		"Trailer: X-Sum\r\nX-Keep:  v  \r\n\r\n")
	var r Request
	if v := ParseRequest(&r, head, make([]Field, MaxFields)); v != Fast {
		t.Fatalf("verdict %d, want fast", v)
	}
	kinds := map[string]uint8{}
	values := map[string]string{}
	for i := range r.Fields {
		kinds[string(r.Fields[i].Name(head))] = r.Fields[i].Kind
		values[string(r.Fields[i].Name(head))] = string(r.Fields[i].Value(head))
	}
	want := map[string]uint8{
		"Host": KindHost, "Connection": KindConnection, "X-Hop": KindDrop, "Keep-Alive": KindDrop,
		"Proxy-Connection": KindDrop, "TE": KindTE, "X-Forwarded-For": KindXFF, "Trailer": KindDrop, "X-Keep": KindOther,
	}
	for k, v := range want {
		if kinds[k] != v {
			t.Errorf("%s: kind %d, want %d", k, kinds[k], v)
		}
	}
	if values["X-Keep"] != "v" {
		t.Errorf("value not trimmed: %q", values["X-Keep"])
	}
	if r.ConnClose || !r.TETrailers || !r.HasProxyFields || string(r.Host) != "a.test" || r.ContentLength != 0 {
		t.Errorf("connClose %v teTrailers %v hasProxyFields %v host %q cl %d", r.ConnClose, r.TETrailers, r.HasProxyFields, r.Host, r.ContentLength)
	}
}

// Responses.

func TestParseResponse(t *testing.T) {
	type want struct {
		status    int
		reason    string
		http10    bool
		cl        int64
		chunked   bool
		connClose bool
		keepAlive bool
		hasDate   bool
	}
	tests := []struct {
		name string
		head string
		err  error
		want want
		drop []string // fields that must not be forwarded (KindDrop, or KindKeepAlive)
		keep []string // fields that must be forwarded as they are
	}{
		{"plain", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", nil, want{status: 200, reason: "OK", cl: 5}, nil, []string{"Content-Length"}},
		{"no reason", "HTTP/1.1 204\r\n\r\n", nil, want{status: 204, cl: -1}, nil, nil},
		{"empty reason", "HTTP/1.1 200 \r\n\r\n", nil, want{status: 200, cl: -1}, nil, nil},
		{"long reason with tab and obs-text", "HTTP/1.1 404 Not\tF\xc3\xbcnd here\r\n\r\n", nil, want{status: 404, reason: "Not\tF\xc3\xbcnd here", cl: -1}, nil, nil},
		{"1xx", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", nil, want{status: 103, reason: "Early Hints", cl: -1}, nil, []string{"Link"}},
		{"status 999", "HTTP/1.1 999 X\r\n\r\n", nil, want{status: 999, reason: "X", cl: -1}, nil, nil},
		{"status 099", "HTTP/1.1 099 X\r\n\r\n", ErrBadResponse, want{}, nil, nil},
		{"two-digit status", "HTTP/1.1 20 OK\r\n\r\n", ErrBadResponse, want{}, nil, nil},
		{"four-digit status", "HTTP/1.1 2000 OK\r\n\r\n", ErrBadResponse, want{}, nil, nil},
		{"letters in status", "HTTP/1.1 2x0 OK\r\n\r\n", ErrBadResponse, want{}, nil, nil},
		{"HTTP/2 version", "HTTP/2 200 OK\r\n\r\n", ErrBadResponse, want{}, nil, nil},
		{"HTTP/1.2 version", "HTTP/1.2 200 OK\r\n\r\n", ErrBadResponse, want{}, nil, nil},
		{"lowercase version", "http/1.1 200 OK\r\n\r\n", ErrBadResponse, want{}, nil, nil},
		{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 0\n\n", ErrBadResponse, want{}, nil, nil},
		{"control byte in reason", "HTTP/1.1 200 O\x01K\r\n\r\n", ErrBadResponse, want{}, nil, nil},
		{"obs-fold", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", ErrBadResponse, want{}, nil, nil},
		{"space before colon", "HTTP/1.1 200 OK\r\nX : a\r\n\r\n", ErrBadResponse, want{}, nil, nil},
		{"no colon", "HTTP/1.1 200 OK\r\nX\r\n\r\n", ErrBadResponse, want{}, nil, nil},
		{"DEL in value", "HTTP/1.1 200 OK\r\nX: a\x7f\r\n\r\n", ErrBadResponse, want{}, nil, nil},
		{"duplicate identical CL", "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n", nil, want{status: 200, reason: "OK", cl: 7}, nil, nil},
		{"differing CL", "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 8\r\n\r\n", ErrBadFraming, want{}, nil, nil},
		{"CL list", "HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n", ErrBadFraming, want{}, nil, nil},
		{"signed CL", "HTTP/1.1 200 OK\r\nContent-Length: +7\r\n\r\n", ErrBadFraming, want{}, nil, nil},
		{"empty CL", "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", ErrBadFraming, want{}, nil, nil},
		{"CL zero", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", nil, want{status: 200, reason: "OK", cl: 0}, nil, nil},
		{"TE chunked and CL: chunked wins, the connection is not reused", "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nTransfer-Encoding: chunked\r\n\r\n", nil, want{status: 200, reason: "OK", cl: -1, chunked: true, connClose: true}, nil, nil},
		{"Connection naming the framing fields drops neither", "HTTP/1.1 200 OK\r\nConnection: Content-Length, Transfer-Encoding\r\nContent-Length: 7\r\n\r\n", nil, want{status: 200, reason: "OK", cl: 7}, nil, []string{"Content-Length"}},
		{"TE chunked any case and spaces", "HTTP/1.1 200 OK\r\nTransfer-Encoding:  ChUnKeD \r\n\r\n", nil, want{status: 200, reason: "OK", cl: -1, chunked: true}, nil, nil},
		{"TE gzip", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", ErrBadFraming, want{}, nil, nil},
		{"TE gzip, chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", ErrBadFraming, want{}, nil, nil},
		{"TE twice", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", ErrBadFraming, want{}, nil, nil},
		{"HTTP/1.0 closes", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", nil, want{status: 200, reason: "OK", http10: true, cl: 1, connClose: true}, nil, nil},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nKeep-Alive: timeout=5\r\n\r\n", nil, want{status: 200, reason: "OK", http10: true, cl: -1, keepAlive: true}, []string{"Keep-Alive"}, nil},
		{"HTTP/1.1 close", "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", nil, want{status: 200, reason: "OK", cl: -1, connClose: true}, nil, nil},
		{"Connection-named fields dropped", "HTTP/1.1 200 OK\r\nConnection: X-A, x-b\r\nX-A: 1\r\nX-B: 2\r\nX-C: 3\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n",
			nil, want{status: 200, reason: "OK", cl: -1, hasDate: true}, []string{"X-A", "X-B"}, []string{"X-C", "Date"}},
		{"Connection naming Date: dropped, and no Date to keep", "HTTP/1.1 200 OK\r\nConnection: date\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n",
			nil, want{status: 200, reason: "OK", cl: -1}, []string{"Date"}, nil},
		{"hop-by-hop dropped, Trailer kept", "HTTP/1.1 200 OK\r\nProxy-Connection: x\r\nUpgrade: h2c\r\nTE: trailers\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n",
			nil, want{status: 200, reason: "OK", cl: -1, chunked: true}, []string{"Proxy-Connection", "Upgrade", "TE"}, []string{"Trailer"}},
		{"101 fields", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X: y\r\n", 101) + "\r\n", ErrTooManyFields, want{}, nil, nil},
	}
	fields := make([]Field, MaxFields)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r Response
			head := []byte(tc.head)
			err := ParseResponse(&r, head, fields)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			got := want{r.Status, string(head[r.ReasonS:r.ReasonE]), r.HTTP10, r.ContentLength, r.Chunked, r.ConnClose, r.KeepAlive, r.HasDate}
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
			kinds := map[string]uint8{}
			for i := range r.Fields {
				kinds[string(r.Fields[i].Name(head))] = r.Fields[i].Kind
			}
			for _, n := range tc.drop {
				if k, ok := kinds[n]; !ok || k != KindDrop {
					t.Errorf("%s: kind %d (present %v), want dropped", n, k, ok)
				}
			}
			for _, n := range tc.keep {
				if k, ok := kinds[n]; !ok || k == KindDrop || k == KindConnection || k == KindKeepAlive || k == KindTransferEncoding {
					t.Errorf("%s: kind %d (present %v), want forwarded", n, k, ok)
				}
			}
			// What we accept, net/http's client reads the same way (status, framing).
			res, rerr := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), nil)
			if rerr != nil {
				t.Fatalf("net/http refuses a head parseResponse accepts: %v", rerr)
			}
			if res.StatusCode != r.Status {
				t.Errorf("net/http status %d", res.StatusCode)
			}
			if r.Chunked != slices.Equal(res.TransferEncoding, []string{"chunked"}) {
				t.Errorf("net/http transfer encoding %q, chunked %v", res.TransferEncoding, r.Chunked)
			}
		})
	}
}

// Chunked bodies.

// scanPieces feeds b to a fresh ChunkScanner in pieces of the given sizes (the last
// piece takes the rest) and returns where it stopped: the body's length when done, the
// offset of the offending byte's end on error, len(b) otherwise.
func scanPieces(t *testing.T, b []byte, sizes []int) (n int, done bool, err error) {
	t.Helper()
	var s ChunkScanner
	off := 0
	for i := 0; off < len(b); i++ {
		k := len(b) - off
		if i < len(sizes) && sizes[i] < k {
			k = sizes[i]
		}
		m, fin, e := s.Scan(b[off : off+k])
		if m < 0 || m > k {
			t.Fatalf("scan returned %d of %d bytes", m, k)
		}
		if m < k && !fin && e == nil {
			t.Fatalf("scan stopped at %d of %d bytes without being done or failing", m, k)
		}
		off += m
		if fin || e != nil {
			return off, fin, e
		}
	}
	return off, false, nil
}

// decodePieces feeds a copy of b, a whole chunked body, to Decode in pieces and returns
// the content and the trailer section.
func decodePieces(t *testing.T, b []byte, sizes []int) (data, trailer []byte) {
	t.Helper()
	b = bytes.Clone(b)
	var s ChunkScanner
	off := 0
	for i := 0; off < len(b); i++ {
		k := len(b) - off
		if i < len(sizes) && sizes[i] < k {
			k = sizes[i]
		}
		m, d, fin, err := s.Decode(b[off : off+k])
		if err != nil || d > m {
			t.Fatalf("Decode: %d of %d bytes, %d data, %v", m, k, d, err)
		}
		data = append(data, b[off:off+d]...)
		off += m
		if fin {
			if off != len(b) {
				t.Fatalf("Decode ended at %d of %d", off, len(b))
			}
			return data, s.Trailer
		}
	}
	t.Fatalf("Decode did not end the body")
	return nil, nil
}

const chunkedPrefix = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"

// checkChunkedAgainstNetHTTP scans b whole, byte by byte and in pieces sized by cuts
// (the result must not depend on the split), and when the scanner says the body ends at
// n, net/http's client must read that body without error and stop exactly there.
func checkChunkedAgainstNetHTTP(t *testing.T, b, cuts []byte) {
	t.Helper()
	n, done, err := scanPieces(t, b, nil)
	ones := make([]int, len(b))
	for i := range ones {
		ones[i] = 1
	}
	sizes := make([]int, len(cuts))
	for i, c := range cuts {
		sizes[i] = int(c) + 1
	}
	for name, sz := range map[string][]int{"byte by byte": ones, "cut": sizes} {
		n2, done2, err2 := scanPieces(t, b, sz)
		if n2 != n || done2 != done || err2 != err {
			t.Fatalf("%s: (%d, %v, %v), whole: (%d, %v, %v)", name, n2, done2, err2, n, done, err)
		}
	}
	if !done {
		return
	}
	if err != nil {
		t.Fatalf("done with an error: %v", err)
	}
	// net/http on exactly the body: it must not need more bytes, nor refuse it.
	for _, tail := range [][]byte{b[:n], b} {
		in := append([]byte(chunkedPrefix), tail...)
		rd := bytes.NewReader(in)
		br := bufio.NewReader(rd)
		res, rerr := http.ReadResponse(br, nil)
		if rerr != nil {
			t.Fatalf("reading the head: %v", rerr)
		}
		content, rerr := io.ReadAll(res.Body)
		if rerr != nil {
			t.Fatalf("scanner accepts the body %q (%d bytes), net/http refuses it: %v", truncQ(b[:n]), n, rerr)
		}
		res.Body.Close()
		// Decode, in the same pieces, yields what net/http's reader does: the content
		// and the trailers.
		for name, sz := range map[string][]int{"whole": nil, "byte by byte": ones, "cut": sizes} {
			data, tr := decodePieces(t, b[:n], sz)
			if !bytes.Equal(data, content) {
				t.Fatalf("%s: Decode gives content %q, net/http %q", name, truncQ(data), truncQ(content))
			}
			got := http.Header{}
			EachTrailer(tr, func(k, v []byte) { got.Add(string(k), string(v)) })
			want := res.Trailer
			if len(want) == 0 {
				want = http.Header{}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: Decode gives trailers %q, net/http %q", name, got, want)
			}
		}
		consumed := len(in) - rd.Len() - br.Buffered()
		if consumed != len(chunkedPrefix)+n {
			t.Fatalf("body %q: scanner ends it after %d bytes, net/http after %d", truncQ(b[:n]), n, consumed-len(chunkedPrefix))
		}
	}
}

func truncQ(b []byte) []byte {
	if len(b) > 200 {
		return append(slices.Clip(b[:200]), "..."...)
	}
	return b
}

func FuzzChunkScanner(f *testing.F) {
	seeds := []string{
		"0\r\n\r\n",
		"5\r\nhello\r\n0\r\n\r\n",
		"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 42\r\nX-B: c\r\n\r\n",
		"A;ext=1;q=\"x\"\r\n0123456789\r\n0;last\r\n\r\n",
		"5 \r\nhello\r\n0\t\r\n\r\n",
		"5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n", // bytes after the body
		"5\nhello\r\n0\r\n\r\n",                         // bare LF
		"5\r\nhelloX\r\n0\r\n\r\n",                      // data longer than announced
		"-5\r\nhello\r\n0\r\n\r\n",
		"0x5\r\nhello\r\n0\r\n\r\n",
		"fffffffffffffff\r\n",
		"ffffffffffffffff\r\n",
		"0\r\nX-Fold: a\r\n b\r\n\r\n",
		"0\r\n\r",
		"1\r\na\r\n",
		"1;\x00\r\na\r\n0\r\n\r\n",
	}
	for i, s := range seeds {
		f.Add([]byte(s), []byte{byte(i), 1, 2, 3})
	}
	f.Fuzz(func(t *testing.T, b, cuts []byte) {
		checkChunkedAgainstNetHTTP(t, b, cuts)
	})
}

// TestChunkScannerAgainstNetHTTP holds the chunked bodies the scanner must agree on
// with net/http (the client most of our clients are, and the reader of FuzzChunkScanner's
// oracle), including the limits at their edges.
func TestChunkScannerAgainstNetHTTP(t *testing.T) {
	ext := func(n int) string { return "1;" + strings.Repeat("e", n-2) + "\r\nx\r\n" }
	tests := []struct {
		name string
		body string
		done bool
		err  error // when not done
	}{
		{"empty", "0\r\n\r\n", true, nil},
		{"two chunks and trailers", "5\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 42\r\n\r\n", true, nil},
		{"uppercase hex", "A\r\n0123456789\r\n0\r\n\r\n", true, nil},
		{"extension", "1;a=b\r\nx\r\n0;c\r\n\r\n", true, nil},
		{"trailing whitespace on size line", "1 \t\r\nx\r\n0\r\n\r\n", true, nil},
		{"incomplete", "5\r\nhel", false, nil},
		{"bare LF after size", "1\nx\r\n0\r\n\r\n", false, ErrBadChunk},
		{"bad data terminator", "1\r\nxy\r\n0\r\n\r\n", false, ErrBadChunk},
		{"no digits", ";x\r\n", false, ErrBadChunk},
		{"16 hex digits", "0000000000000001\r\nx\r\n0\r\n\r\n", false, ErrChunkTooLarge},
		{"size line of 4094 bytes", ext(4094) + "0\r\n\r\n", true, nil},
		// net/http's client reads chunk lines through a 4 KiB bufio.Reader: with CRLF,
		// 4095 bytes do not fit.
		{"size line of 4095 bytes", ext(4095) + "0\r\n\r\n", false, ErrChunkTooLarge},
		{"size line too long (4096 bytes)", ext(4096), false, ErrChunkTooLarge},
		{"trailer without colon", "0\r\nnot a field\r\n\r\n", false, ErrBadChunk},
		{"trailer starting with a space", "0\r\n X: y\r\n\r\n", false, ErrBadChunk},
		{"space before extension", "1 ;a\r\nx\r\n0\r\n\r\n", false, ErrBadChunk},
		{"4 KiB trailer section", "0\r\nX: " + strings.Repeat("t", 4200) + "\r\n\r\n", false, ErrChunkTooLarge},
		{"trailer section of exactly 4 KiB", "0\r\nX: " + strings.Repeat("t", 4096-7) + "\r\n\r\n", true, nil},
		{"much extension overhead", strings.Repeat(ext(3000), 8) + "0\r\n\r\n", false, ErrChunkTooLarge},
		{"some extension overhead", strings.Repeat(ext(3000), 5) + "0\r\n\r\n", true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte(tc.body)
			n, done, err := scanPieces(t, b, nil)
			if done != tc.done || err != tc.err || (done && n != len(b)) {
				t.Fatalf("scan: n %d of %d, done %v, err %v; want done %v, err %v", n, len(b), done, err, tc.done, tc.err)
			}
			checkChunkedAgainstNetHTTP(t, b, []byte{0, 7, 2, 200})
		})
	}
}

// TestHopByHopOneSet: the fast path's field classifier and the net/http path's HopByHop
// name the same hop-by-hop set, so that both paths forward the same fields. (Trailer
// stays on fast-path responses: their chunked bodies, trailers included, pass through
// verbatim.)
func TestHopByHopOneSet(t *testing.T) {
	for _, name := range HopByHop {
		for _, n := range []string{name, strings.ToLower(name), strings.ToUpper(name)} {
			if k := requestFieldKind([]byte(n)); k == KindOther {
				t.Errorf("request field %s is hop-by-hop for net/http's path, forwarded by the fast path", n)
			}
			if k := responseFieldKind([]byte(n)); k == KindOther && !strings.EqualFold(n, "Trailer") {
				t.Errorf("response field %s is hop-by-hop for net/http's path, relayed by the fast path", n)
			}
		}
	}
	// Every field the fast path drops or handles specially is in the set, or is one of
	// the fields it handles for a reason of its own.
	own := []string{"Host", "Content-Length", "Expect", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host",
		"Forwarded", "X-Real-Ip", "Date", "Alt-Svc"}
	for _, n := range []string{"Host", "Content-Length", "Expect", "X-Forwarded-For", "X-Forwarded-Proto",
		"X-Forwarded-Host", "Forwarded", "X-Real-Ip", "Date", "Alt-Svc", "Accept", "Cookie", "Set-Cookie", "Trailer",
		"Keep-Alive", "Upgrade", "Te", "Proxy-Connection"} {
		inSet := slices.ContainsFunc(HopByHop[:], func(h string) bool { return strings.EqualFold(h, n) })
		special := requestFieldKind([]byte(n)) != KindOther || responseFieldKind([]byte(n)) != KindOther
		if special && !inSet && !slices.Contains(own, n) {
			t.Errorf("%s is handled specially by the fast path but is not in HopByHop", n)
		}
	}
}

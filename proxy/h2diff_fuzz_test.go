package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http2"
)

// h2Outcome is how one request over a fresh h2c connection ended, as the client saw it.
type h2Outcome struct {
	status string // :status of the final response; "" when none came
	body   string
	rst    http2.ErrCode // RST_STREAM on the request's stream
	goaway http2.ErrCode
	ended  string // "response", "reset", "goaway", "closed"
}

func (o h2Outcome) String() string {
	switch o.ended {
	case "response":
		return "response " + o.status + " " + o.body
	case "reset":
		return "RST_STREAM " + o.rst.String()
	case "goaway":
		return "GOAWAY " + o.goaway.String()
	}
	return o.ended
}

// h2Exchange sends one request (a header block of fields, then body as DATA when not
// empty) on a new h2c connection to addr and reports how it ended.
func h2Exchange(t testing.TB, addr string, fields [][2]string, body []byte) h2Outcome {
	nc, fr := h2Open(t, addr, len(body) == 0, fields...)
	defer nc.Close()
	if len(body) > 0 {
		_ = fr.WriteData(1, true, body)
	}
	var o h2Outcome
	var got bytes.Buffer
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			o.ended = "closed"
			return o
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if st := f.PseudoValue("status"); st != "" && st[0] != '1' {
				o.status = st
			}
			if f.StreamEnded() && o.status != "" {
				o.ended, o.body = "response", got.String()
				return o
			}
		case *http2.DataFrame:
			if f.StreamID == 1 {
				got.Write(f.Data())
				if f.StreamEnded() {
					o.ended, o.body = "response", got.String()
					return o
				}
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				if o.status != "" && f.ErrCode == http2.ErrCodeNo {
					continue // the response is complete; the body was left unread
				}
				o.ended, o.rst = "reset", f.ErrCode
				return o
			}
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeNo || f.LastStreamID == 0 {
				o.ended, o.goaway = "goaway", f.ErrCode
				return o
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		}
	}
}

// h2AcceptedDifference reports whether std and own may differ this way for a request
// with these method, path, :authority and extra field, and why.
func h2AcceptedDifference(method, path, authority, name, value string, std, own h2Outcome) (string, bool) {
	ownMalformed := own.ended == "reset" && own.rst == http2.ErrCodeProtocol
	if ownMalformed && name == "host" && value != authority && std.ended == "response" {
		// RFC 9113 §8.3.1: a Host that names another entity than :authority makes the
		// request malformed for the own server; net/http's (Go 1.27) routes by
		// :authority and forwards it.
		return "Host differing from :authority: stream error", true
	}
	if name == "trailer" && std.ended == "response" && std.status == "502" && own.ended == "response" {
		// Trailers announced: net/http's server turns the announcement into
		// Request.Trailer keys, which its request writer refuses when a name is empty or
		// invalid (502); the own server forwards the announcement as a Trailer field
		// with a chunked body, or drops it when there is no body.
		return "trailer announcement net/http's writer refuses", true
	}
	if name == "trailer" && std.ended == "response" && own.ended == "response" && std.status == own.status &&
		announcedTrailersOnly(value, std.body, own.body) {
		// A request with a body (and so, in this fuzzer, a content-length) that
		// announces trailers: the own server forwards the body chunked with the
		// announcement, so that trailers the client sends reach the target (framing
		// derived from what is forwarded, the client's content-length not copied);
		// net/http's server forwards it with the content-length and drops the trailers.
		return "trailers announced on a request with a body: forwarded chunked", true
	}
	if ownMalformed && name == "content-length" && std.ended == "response" {
		// RFC 9113 §8.1.1: a content-length that is not a number (or disagrees with
		// the DATA) makes the request malformed; net/http's server drops a field it
		// cannot parse and answers.
		return "invalid content-length: stream error", true
	}
	if ownMalformed && std.ended == "response" && slices.ContainsFunc([]string{method, path, authority, value}, h2OuterWhitespace) {
		// RFC 9113 §8.2.1: a field value may not start or end with SP or HTAB (the
		// request is malformed); x/net's Framer lets such values through.
		return "field value with outer whitespace: stream error", true
	}
	if ownMalformed && path == "*" && method != "OPTIONS" && std.ended == "response" {
		// RFC 9113 §8.3.1: "*" is the path of OPTIONS only. net/http's server takes it
		// (and we route it); the own server refuses the malformed request.
		return `":path" "*" without OPTIONS: stream error`, true
	}
	if method == "OPTIONS" && path == "*" && std.ended == "response" && std.status == "200" && std.body == "" {
		// net/http's server answers "OPTIONS *" itself (200, empty) whatever the host;
		// the own server routes it like any request (to the target, or 404).
		return "OPTIONS * answered by net/http itself", true
	}
	if ownMalformed && std.ended == "response" && std.status[0] == '4' {
		// RFC 9113 §8.1.1: a malformed request is a stream error of type
		// PROTOCOL_ERROR; net/http's server (or our handler behind it) answers 400.
		return "malformed request: stream error instead of 400", true
	}
	if std.ended == "goaway" && std.goaway == http2.ErrCodeProtocol && own.ended == "reset" && own.rst == http2.ErrCodeProtocol {
		// An invalid field in a request: net/http's server ends the connection, the own
		// one resets the stream, the malformed request's error RFC 9113 §8.1.1 names;
		// the connection's other streams go on.
		return "invalid field: stream error instead of connection error", true
	}
	if name == "user-agent" && value == "" && std.ended == "response" && own.ended == "response" &&
		strings.Replace(own.body, `"User-Agent":[""],`, "", 1) == std.body {
		// An empty User-Agent: net/http's request writer leaves it out; the byte-level
		// paths (the HTTP/1.1 fast path and the own server's, h2bytes.go) forward the
		// field as the client sent it.
		return "empty User-Agent forwarded", true
	}
	if authority == "" && name != "host" && own.ended == "response" && own.status == "400" && std.ended == "response" && std.status == "404" {
		// No authority at all: the own server answers 400, as an HTTP/1.1 request
		// without Host gets (RFC 9112 §3.2); net/http's looks the empty host up (404).
		return "request without authority: 400 instead of 404", true
	}
	if name == "expect" && strings.EqualFold(value, "100-continue") && std.ended == "response" && own.ended == "response" &&
		strings.Replace(own.body, `"Expect":["`+value+`"],`, "", 1) == std.body {
		// A request with a body and Expect: 100-continue: the own server forwards the
		// expectation and sends the body once the target said 100 (h2upload.go), so
		// that a target can refuse an upload before it flows; net/http's server
		// consumes it.
		return "100-continue forwarded with the body", true
	}
	if name == "expect" && !strings.EqualFold(value, "100-continue") && own.ended == "response" && own.status == "417" {
		// An unknown expectation: the own server answers 417 before routing, with the
		// fixed answer every front-end sends (errors.go), as net/http's HTTP/1.1 server
		// does; net/http's HTTP/2 server answers 417 (empty) for some requests and
		// routes others (404, or the target's answer).
		return "unknown Expect: 417 before routing", true
	}
	if std.ended == "reset" && own.ended == "reset" {
		return "both refused the stream", true
	}
	return "", false
}

// announcedTrailersOnly reports whether the target's echoes of the same request through
// both servers (recordingTarget's JSON) differ only in this: net/http's carried a
// Content-Length and no trailers, the own server's no Content-Length and, as trailers,
// names from the announcement.
func announcedTrailersOnly(announced, stdEcho, ownEcho string) bool {
	var std, own seenRequest
	if json.Unmarshal([]byte(stdEcho), &std) != nil || json.Unmarshal([]byte(ownEcho), &own) != nil {
		return false
	}
	if std.Trailer != nil || len(own.Trailer) == 0 || len(std.Header["Content-Length"]) != 1 || own.Header["Content-Length"] != nil {
		return false
	}
	for k := range own.Trailer {
		if !slices.ContainsFunc(strings.Split(announced, ","), func(n string) bool { return strings.EqualFold(strings.TrimSpace(n), k) }) {
			return false
		}
	}
	delete(std.Header, "Content-Length")
	std.Trailer, own.Trailer = nil, nil
	return reflect.DeepEqual(std, own)
}

func h2OuterWhitespace(v string) bool {
	return v != "" && (strings.ContainsRune(" \t", rune(v[0])) || strings.ContainsRune(" \t", rune(v[len(v)-1])))
}

// FuzzH2OwnMatchesStd: the same request head and body through net/http's HTTP/2 server
// and the own one; the client's outcome (and, through the recording target's echo, what
// the target saw) must match, or differ only as h2AcceptedDifference allows.
func FuzzH2OwnMatchesStd(f *testing.F) {
	f.Add("GET", "/a?b=c", "app.example.test", "x-one", "1", "")
	f.Add("POST", "/p", "app.example.test", "content-type", "text/plain", "hello")
	f.Add("GET", "/", "app.example.test", "cookie", "a=1", "")
	f.Add("GET", "/", "app.example.test", "te", "trailers", "")
	f.Add("GET", "/", "app.example.test", "connection", "close", "")
	f.Add("PUT", "/x y", "app.example.test", "x-a", "b", "body")
	f.Add("GET", "/", "nope.example.test", "x", "y", "")
	f.Add("OPTIONS", "*", "app.example.test", "x", "y", "")
	f.Add("GET", "/", "app.example.test:80", "host", "app.example.test", "")
	// The byte-level path (h2bytes.go): targets re-escaped or not, fields it drops or
	// derives.
	f.Add("GET", "/a\"b{c}|d^e`f?q=\"x\"", "app.example.test", "user-agent", "", "")
	f.Add("GET", "/%41%2f[x]:@!$&'()*+,;=~", "app.example.test", "x-forwarded-for", "1.2.3.4", "")
	f.Add("GET", "/caf\u00e9#frag", "app.example.test", "x_forwarded_for", "1.2.3.4", "")
	f.Add("POST", "/empty", "app.example.test", "content-length", "0", "")
	f.Add("DELETE", "/", "app.example.test", "forwarded", "for=1.2.3.4", "")
	f.Add("HEAD", "/", "app.example.test", "x-want-chunked", "1", "")
	f.Add("GET", "/", "app.example.test", "x-want-trailer", "t", "")
	f.Add("GET", "/", "app.example.test", "x-want-status", "304", "")
	f.Add("GET", "/", "app.example.test", "expect", "100-continue", "")
	f.Add("GET", "/", "app.example.test", "expect", "something-else", "")
	f.Add("GET", "/", "app.example.test", "trailer", "", "")
	f.Add("POST", "/", "app.example.test", "trailer", "", "body")
	f.Add("GET", "/", "app.example.test", "x-a", " padded\t", "")
	f.Add("POST", "/", "app.example.test", "trailer", "x-t, x-u", "body")
	be := recordingTarget(f)
	envs := map[string]*env{}
	for _, impl := range []string{h2Std, h2Own} {
		e := newEnv(f, withH2(impl))
		e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
		envs[impl] = e
	}
	f.Fuzz(func(t *testing.T, method, path, authority, name, value, body string) {
		fields := [][2]string{{":method", method}, {":scheme", "http"}, {":authority", authority}, {":path", path}, {name, value}}
		if len(body) > 0 {
			fields = append(fields, [2]string{"content-length", fmt.Sprint(len(body))})
		}
		std := h2Exchange(t, envs[h2Std].http, fields, []byte(body))
		own := h2Exchange(t, envs[h2Own].http, fields, []byte(body))
		if std.String() == own.String() {
			return
		}
		if _, ok := h2AcceptedDifference(method, path, authority, name, value, std, own); ok {
			return
		}
		t.Fatalf("%q: std: %v\nown: %v", fields, std, own)
	})
}

package proxy

import (
	"bytes"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http2/hpack"
)

// challenge asks Config.HTTPChallenge about a request for an ACME HTTP-01 path on a
// plain connection, before routing, as the net/http path does (challenge.go). The hook
// takes net/http's types: it gets a request built from the stream's head and a
// ResponseWriter that buffers (cold path, a few requests per certificate).
func (x *streamWork) challenge() bool {
	s, rq := x.p.s, x.rq
	if x.f.secure || s.cfg.HTTPChallenge == nil || !strings.HasPrefix(rq.Path, acmeChallengePrefix) {
		return false
	}
	u, err := url.ParseRequestURI(rq.Path)
	if err != nil {
		return false
	}
	h := make(http.Header, len(rq.Fields))
	for _, f := range rq.Fields {
		k := http.CanonicalHeaderKey(f.Name)
		h[k] = append(h[k], f.Value)
	}
	r := (&http.Request{Method: rq.Method, URL: u, Proto: "HTTP/2.0", ProtoMajor: 2, Header: h,
		Host: rq.Authority, RemoteAddr: x.f.remote, RequestURI: rq.Path, Body: http.NoBody}).WithContext(x.st.Context())
	w := &bufferedResponse{h: http.Header{}}
	if !s.cfg.HTTPChallenge(w, r) {
		return false
	}
	if w.code == 0 {
		w.code = http.StatusOK
	}
	fields := make([]hpack.HeaderField, 0, len(w.h)+3)
	for k, vv := range w.h {
		if k == "Content-Length" {
			continue
		}
		for _, v := range vv {
			fields = append(fields, hpack.HeaderField{Name: lowerFieldName(k), Value: v})
		}
	}
	fields = append(fields, hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(w.body.Len())})
	fields = s.commonFields(fields, false, x.p.altSvc)
	x.p.status = w.code
	x.p.out += headBytes(fields) + int64(w.body.Len())
	_ = x.st.WriteHead(w.code, fields, w.body.Bytes(), true)
	return true
}

// bufferedResponse is the ResponseWriter handed to the challenge hook.
type bufferedResponse struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (w *bufferedResponse) Header() http.Header { return w.h }

func (w *bufferedResponse) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *bufferedResponse) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

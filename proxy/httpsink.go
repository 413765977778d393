package proxy

import (
	"context"
	"net/http"

	"github.com/serve-zone/ingress/internal/ascii"
	"golang.org/x/net/http2/hpack"
)

// httpSink is net/http's response writer as the relay's answerSink. Each write must
// complete within ClientSendTimeout (sendProgress); an answer of unknown length or an
// event stream is flushed at every write, so that it flows.
type httpSink struct {
	w      http.ResponseWriter
	r      *http.Request
	cutOff bool // cut: the response is aborted after its accounting
	sp     sendProgress
	list   []hpack.HeaderField // fields' list, reused
	fl     http.Flusher
	flush  bool
	wrote  bool
}

func (k *httpSink) fields(n int) []hpack.HeaderField {
	if cap(k.list) < n {
		k.list = make([]hpack.HeaderField, 0, n)
	}
	return k.list[:0]
}

func (k *httpSink) context() context.Context { return k.r.Context() }

func (k *httpSink) head(status int, fields []hpack.HeaderField, body []byte, end bool) error {
	dst := k.w.Header()
	delete(dst, "Alt-Svc") // set by ServeHTTP; the relay's fields carry it
	hasLength := false
	// The values' one backing array is the answer's own: a writer may serialise the
	// header only when the handler returns, after the work area went back to its pool.
	vals := make([]string, 0, len(fields))
	for _, f := range fields {
		key := canonicalName(f.Name)
		switch key {
		case "Content-Length":
			hasLength = true
		case "Content-Type":
			k.flush = isEventStreamValue(f.Value)
		}
		if prior := dst[key]; len(prior) > 0 {
			dst[key] = append(prior, f.Value) // a repeated field (Set-Cookie): its own array
			continue
		}
		vals = append(vals, f.Value)
		dst[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	k.fl, _ = k.w.(http.Flusher)
	if _, ok := dst["Content-Type"]; !ok {
		// Present without a value: net/http then guesses no type for a body the target
		// sent untyped (a proxy relays, it does not sniff), and writes no field.
		dst["Content-Type"] = nil
	}
	k.flush = k.flush || !hasLength
	k.w.WriteHeader(status)
	if len(body) == 0 {
		if !end && k.flush {
			return k.doFlush()
		}
		return nil
	}
	return k.write(body, end)
}

func (k *httpSink) data(b []byte) error { return k.write(b, false) }

func (k *httpSink) write(b []byte, last bool) error {
	k.sp.before(last)
	_, err := k.w.Write(b)
	if err == nil && k.flush {
		err = k.doFlush()
	}
	k.sp.after()
	if err == nil {
		k.wrote = true
	}
	return err
}

func (k *httpSink) doFlush() error {
	if k.fl != nil {
		k.fl.Flush()
	}
	return nil
}

func (k *httpSink) end(trailers []hpack.HeaderField) error {
	dst := k.w.Header()
	for _, f := range trailers {
		key := http.TrailerPrefix + canonicalName(f.Name)
		dst[key] = append(dst[key], f.Value)
	}
	return nil
}

// cut aborts the response after its accounting (ServeHTTP panics with
// http.ErrAbortHandler), so that the client never takes the truncated body for whole.
func (k *httpSink) cut() { k.cutOff = true }

// canonicalName is a lower-case field name in net/http's canonical form, without
// allocating for the common ones.
func canonicalName(lower string) string {
	if v, ok := canonicalNames[lower]; ok {
		return v
	}
	return http.CanonicalHeaderKey(lower)
}

var canonicalNames = func() map[string]string {
	m := make(map[string]string, len(lowerNames))
	for k, v := range lowerNames {
		m[v] = k
	}
	return m
}()

func isEventStreamValue(ct string) bool {
	return len(ct) >= len("text/event-stream") && ascii.EqualLower(ct[:len("text/event-stream")], "text/event-stream")
}

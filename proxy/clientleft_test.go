package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest/observer"

	"github.com/serve-zone/ingress/routetable"
)

// sseTarget streams an event every few milliseconds until its client goes (at most 10 s).
func sseTarget(t *testing.T) string {
	return backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		stop := time.After(10 * time.Second)
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "data: event %d\n\n", i); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}))
}

// TestClientLeftEventStream: a client that stops an event stream it was reading (a
// browser closing an EventSource) is logged as gone, 499, on every protocol, not as the
// target's 200 with the error of the target connection the ingress closed; and it is no
// backend failure.
func TestClientLeftEventStream(t *testing.T) {
	var logs, access *observer.ObservedLogs
	e := newEnv(t, withHTTP3, withLogs(&logs, &access))
	be := sseTarget(t)
	e.apply([]routeSpec{
		{host: "sse.example.test", backends: []string{be}},
		{host: "sses.example.test", tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{be}},
	}, certSpec{"c1", []string{"sses.example.test"}})
	h3, _ := e.h3Client()
	var hlogs, haccess *observer.ObservedLogs
	eh := newEnv(t, withH1Off, withLogs(&hlogs, &haccess)) // net/http's HTTP/1.1 front-end
	eh.apply([]routeSpec{{host: "sse.example.test", backends: []string{be}}})
	clients := []struct {
		name, url string
		c         *http.Client
		e         *env
		access    *observer.ObservedLogs
	}{
		{"HTTP/1.1", "http://sse.example.test/events", e.h1Client(), e, access},
		{"HTTP/2", "http://sse.example.test/events", e.h2cClient(), e, access},
		{"HTTP/1.1 over TLS", "https://sses.example.test/events", e.tlsClient(false), e, access},
		{"HTTP/2 over TLS", "https://sses.example.test/events", e.tlsClient(true), e, access},
		{"HTTP/3", "https://sses.example.test/events", h3, e, access},
		{"HTTP/1.1 on net/http", "http://sse.example.test/events", eh.h1Client(), eh, haccess},
	}
	for _, tc := range clients {
		t.Run(tc.name, func(t *testing.T) {
			access := tc.access
			access.TakeAll()
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, tc.url, nil)
			res, err := tc.c.Do(req)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			line, err := bufio.NewReader(res.Body).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "data: event") {
				t.Fatalf("first event: %q %v", line, err)
			}
			cancel() // the client leaves mid-stream
			res.Body.Close()
			waitFor(t, "the stream's access log line", func() bool { return access.Len() >= 1 })
			en := access.TakeAll()[0]
			m := en.ContextMap()
			if st := m["status"]; st != int64(statusClientClosed) {
				t.Errorf("status %v, want %d (client gone): %v", st, statusClientClosed, m)
			}
			if s, _ := m["error"].(string); strings.Contains(s, "closed network connection") {
				t.Errorf("error %q: the ingress's own close of the target connection, not why the request ended", s)
			}
		})
	}
	noBackendFailures(t, e)
	noBackendFailures(t, eh)
}

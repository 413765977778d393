package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// obsValue is a field value with obs-text (RFC 9110 §5.5: octets 0x80 to 0xFF).
const obsValue = "a\x80\xffb"

// TestObsTextReachesTargetAsSent (issue 33, item 4): a field value with obs-text reaches
// an HTTP/1.1 target byte for byte, whichever protocol the client spoke: the HTTP/1.1
// fast path's rule (h1wire.BadValueByte refuses control bytes and DEL, not obs-text;
// net/http's hand-off accepts it too), which RFC 9110 allows (a recipient treats
// obs-text as opaque) and nginx follows on HTTP/1.1, HTTP/2 and HTTP/3. The field's
// bytes are the client's; no path drops, re-encodes or refuses them.
func TestObsTextReachesTargetAsSent(t *testing.T) {
	e := newEnv(t, withHTTP3)
	addr, seen := captureServer(t, false)
	e.tlsRoute("app.example.test", addr)

	h3, _ := e.h3Client()
	clients := []struct {
		name string
		do   func() (int, error)
	}{
		{"HTTP/1.1 fast path", func() (int, error) {
			rc := newRawClient(t, e.http)
			rc.send("GET /h1 HTTP/1.1\r\nHost: app.example.test\r\nX-Obs: " + obsValue + "\r\n\r\n")
			res, _ := rc.read("GET")
			return res.StatusCode, nil
		}},
		{"HTTP/1.0 through net/http", func() (int, error) {
			rc := newRawClient(t, e.http)
			rc.send("GET /h10 HTTP/1.0\r\nHost: app.example.test\r\nX-Obs: " + obsValue + "\r\n\r\n")
			res, _ := rc.read("GET")
			return res.StatusCode, nil
		}},
		{"h2c", func() (int, error) { return getObs(e.h2cClient(), "http://app.example.test/h2c") }},
		{"h2 over TLS", func() (int, error) { return getObs(e.tlsClient(true), "https://app.example.test/h2") }},
		{"HTTP/3", func() (int, error) { return getObs(h3, "https://app.example.test/h3") }},
	}
	for _, c := range clients {
		code, err := c.do()
		if err != nil || code != 200 {
			t.Fatalf("%s: %d %v", c.name, code, err)
		}
	}
	got := seen()
	for _, path := range []string{"/h1", "/h10", "/h2c", "/h2", "/h3"} {
		i := strings.Index(got, "GET "+path+" ")
		if i < 0 {
			t.Fatalf("the target saw no request for %s:\n%q", path, got)
		}
		head := got[i:]
		head = head[:strings.Index(head, "\r\n\r\n")+2]
		if !strings.Contains(head, "\r\nx-obs: "+obsValue+"\r\n") && !strings.Contains(head, "\r\nX-Obs: "+obsValue+"\r\n") {
			t.Errorf("%s: the target's head holds no x-obs field with %q:\n%q", path, obsValue, head)
		}
	}
}

// getObs sends GET url with X-Obs: obsValue over c.
func getObs(c *http.Client, url string) (int, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Obs", obsValue)
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

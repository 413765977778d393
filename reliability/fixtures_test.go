package reliability

// Backends, clients and runs the tests share (route tables and targets come from
// internal/binarytest).

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/relaysim"
	"github.com/serve-zone/ingress/routetable"
)

const (
	testBearer = "rel-bearer-K9!zzTOPsecret-4242"
	testNode   = "node-rel-1"
)

// echoBackend answers "name path" for every request.
func echoBackend(t *testing.T, name string) routetable.Target {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", name, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return binarytest.TargetOf(t, srv.Listener.Addr().String(), "lease-"+name)
}

// standalone starts the binary serving routes from a file and waits until it is ready.
func standalone(t *testing.T, table []byte, extra ...string) (*proc, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "routes.json")
	binarytest.WriteFileAtomic(t, path, table)
	p := start(t, nil, binarytest.BaseArgs(append([]string{"--routes", path}, extra...)...)...)
	waitReady(t, p)
	return p, path
}

// startRelay starts a relaysim accepting only testBearer.
func startRelay(t *testing.T) (*relaysim.Server, string) {
	t.Helper()
	rs := relaysim.New(relaysim.Options{})
	origin, err := rs.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	rs.ExpectedBearer(testBearer)
	return rs, origin
}

// waitReady polls /readyz until it answers 200.
func waitReady(t *testing.T, p *proc) {
	t.Helper()
	testwait.UntilWhy(t, waitLimit, "/readyz 200", func() (bool, string) {
		resp, err := adminClient.Get("http://" + p.Admin + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// client is a keep-alive client (h2 over TLS when offered) whose idle connections close at
// cleanup; it never follows redirects.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 64,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport:     tr,
		Timeout:       waitLimit,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// do sends method http://addr/path with Host host and returns status and body.
func do(ctx context.Context, c *http.Client, method, addr, host, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// mustStatus sends GET and fails unless it is answered with want.
func mustStatus(t *testing.T, c *http.Client, addr, host, path string, want int) string {
	t.Helper()
	code, body, err := do(context.Background(), c, http.MethodGet, addr, host, path)
	if err != nil {
		t.Fatalf("GET %s (Host %s): %v", path, host, err)
	}
	if code != want {
		t.Fatalf("GET %s (Host %s) = %d %q, want %d", path, host, code, body, want)
	}
	return body
}

// listen opens a loopback listener closed at cleanup.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

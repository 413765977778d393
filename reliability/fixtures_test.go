package reliability

// Route tables, backends and clients the tests share.

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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
	return targetOf(t, srv.Listener.Addr().String(), "lease-"+name)
}

func targetOf(t *testing.T, addr, lease string) routetable.Target {
	t.Helper()
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil {
		t.Fatal(err)
	}
	return routetable.Target{LeaseID: lease, Address: host, Port: port}
}

// route is a plain-HTTP route (cert "" ) or a TLS one with certificate id cert.
func route(hostname, cert string, targets ...routetable.Target) routetable.Route {
	targets = slices.Clone(targets)
	slices.SortFunc(targets, func(a, b routetable.Target) int {
		return cmp.Or(strings.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port))
	})
	r := routetable.Route{Hostname: hostname, Targets: targets}
	if cert != "" {
		r.TLS = &routetable.RouteTLS{CertificateID: cert}
	}
	return r
}

// tableJSON encodes a table in contract order.
func tableJSON(t *testing.T, revision int64, certs []routetable.Certificate, routes ...routetable.Route) []byte {
	t.Helper()
	routes = slices.Clone(routes)
	slices.SortFunc(routes, func(a, b routetable.Route) int { return strings.Compare(a.Hostname, b.Hostname) })
	certs = slices.Clone(certs)
	slices.SortFunc(certs, func(a, b routetable.Certificate) int { return strings.Compare(a.ID, b.ID) })
	if routes == nil {
		routes = []routetable.Route{}
	}
	if certs == nil {
		certs = []routetable.Certificate{}
	}
	b, err := json.Marshal(routetable.Table{Revision: revision, Routes: routes, Certificates: certs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeRoutes writes a standalone routes file (replaced by a rename, as config managers do).
func writeRoutes(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".next-"+filepath.Base(path))
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// standalone starts the binary serving routes from a file and waits until it is ready.
func standalone(t *testing.T, table []byte, extra ...string) (*proc, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "routes.json")
	writeRoutes(t, path, table)
	p := start(t, nil, baseArgs(append([]string{"--routes", path}, extra...)...)...)
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
	eventually(t, waitLimit, "/readyz 200", func() (bool, string) {
		resp, err := adminClient.Get("http://" + p.admin + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// eventually polls cond every 20 ms until it holds, failing after limit with its last reason.
func eventually(t *testing.T, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, limit, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/pebbletest"
	"github.com/serve-zone/ingress/internal/testcert"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// acmeRoute is a route whose certificate the ingress obtains itself.
func acmeRoute(hostname string, redirect bool, targets ...routetable.Target) routetable.Route {
	r := binarytest.Route(hostname, "", false, targets...)
	r.TLS = &routetable.RouteTLS{ACME: true, RedirectHTTP: redirect}
	return r
}

// readyz returns /readyz's status and body.
func readyz(t *testing.T, admin string) (int, string) {
	t.Helper()
	res, err := http.Get("http://" + admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestACMENeedsStateDir: a routes file with an ACME route and no --state-dir is refused at
// start with exit status 2, and the reason names the flag.
func TestACMENeedsStateDir(t *testing.T) {
	_, target := echoBackend(t, "backend", 0)
	file := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(file, binarytest.TableJSON(t, 1, nil, acmeRoute("auto.example.test", true, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := realMain(append(binarytest.BaseArgs("--routes", file), "--admin-addr", ""), io.Discard, &stderr, func(string) (string, bool) { return "", false })
	if code != exitConfig {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitConfig, stderr.String())
	}
	for _, want := range []string{"routes[0].tls.acme (auto.example.test): automatic HTTPS needs --state-dir"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestACMEFlagsRefused: bad --acme-* values are refused with exit status 2, each named.
func TestACMEFlagsRefused(t *testing.T) {
	var stderr bytes.Buffer
	code := realMain(append(binarytest.BaseArgs("--routes", "/nonexistent/routes.json"),
		"--acme-ca", "http://ca.example.test/dir", "--acme-challenges", "dns-01", "--acme-ca-root", "/nonexistent/root.pem"),
		io.Discard, &stderr, func(string) (string, bool) { return "", false })
	if code != exitConfig {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitConfig, stderr.String())
	}
	for _, want := range []string{"--acme-ca: CA directory", "--acme-challenges: \"dns-01\"", "--acme-ca-root: open /nonexistent/root.pem"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestE2EACMEUnreachableCA runs the binary with an ACME route whose CA does not answer: the
// failed attempt is logged with its kind, /readyz stays 200 and explains, and the other
// routes (plain, and TLS with the table's own certificate) keep serving.
func TestE2EACMEUnreachableCA(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	_, target := echoBackend(t, "backend", 0)
	certPEM, keyPEM, err := testcert.Generate("table.example.test")
	if err != nil {
		t.Fatal(err)
	}
	certs := []routetable.Certificate{{ID: "cert-1", CertificatePEM: certPEM, PrivateKeyPEM: keyPEM}}
	dir := t.TempDir()
	file := filepath.Join(dir, "routes.json")
	if err := os.WriteFile(file, binarytest.TableJSON(t, 1, certs,
		acmeRoute("auto.example.test", false, target),
		binarytest.Route("plain.example.test", "", false, target),
		binarytest.Route("table.example.test", "cert-1", false, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startIngress(t, nil, binarytest.BaseArgs("--routes", file, "--state-dir", filepath.Join(dir, "state"),
		"--acme-ca", "https://127.0.0.1:"+deadPort(t)+"/dir", "--acme-agree")...)
	line := p.WaitLine(e2eWait, func(m map[string]any) bool {
		return m["msg"] == "acme: certificate not obtained; certmagic retries with backoff"
	})
	if line["hostname"] != "auto.example.test" || line["kind"] != "ca_unreachable" {
		t.Errorf("failure line %v, want hostname auto.example.test and kind ca_unreachable", line)
	}
	code, body := readyz(t, p.Admin)
	if code != http.StatusOK || !strings.Contains(body, "acme: 1 hostname(s), 0 with a valid certificate") ||
		!strings.Contains(body, "acme: auto.example.test: no certificate yet") || !strings.Contains(body, "ca_unreachable") {
		t.Errorf("/readyz = %d %q, want 200 explaining the ACME route", code, body)
	}
	c := httpClient(t)
	mustGet(t, c, p.HTTP, "plain.example.test", "/", 200)
	mustGet(t, c, p.HTTP, "auto.example.test", "/", 200) // redirectHttp false
	if st, _ := httpsGet(t, p.HTTPS, "table.example.test"); st != 200 {
		t.Errorf("the table's certificate route answered %d", st)
	}
	if c, err := tls.Dial("tcp", p.HTTPS, &tls.Config{ServerName: "auto.example.test", InsecureSkipVerify: true}); err == nil {
		c.Close()
		t.Error("a TLS handshake for the ACME route without a certificate succeeded")
	} else if !strings.Contains(err.Error(), "unrecognized name") {
		t.Errorf("handshake: %v, want unrecognized_name", err)
	}
	m := mustGet(t, c, p.Admin, "", "/metrics", 200).body
	for _, want := range []string{`ingress_acme_failures_total{kind="ca_unreachable"} 1`, `ingress_acme_certificates{state="missing"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	p.Stop(e2eWait)
}

// TestE2EACMEEditWithoutStateDir: without --state-dir, an edit of the routes file that adds
// an ACME route is refused whole, with the reason, and the previous table keeps serving.
func TestE2EACMEEditWithoutStateDir(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	_, target := echoBackend(t, "backend", 0)
	file := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(file, binarytest.TableJSON(t, 1, nil, binarytest.Route("plain.example.test", "", false, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startIngress(t, nil, binarytest.BaseArgs("--routes", file)...)
	binarytest.WriteFileAtomic(t, file, binarytest.TableJSON(t, 2, nil, binarytest.Route("plain.example.test", "", false, target), acmeRoute("auto.example.test", true, target)))
	line := p.WaitLine(e2eWait, func(m map[string]any) bool {
		v, _ := m["violation"].(string)
		return m["msg"] == "route table violation" && strings.Contains(v, "automatic HTTPS needs --state-dir")
	})
	_ = line
	c := httpClient(t)
	mustGet(t, c, p.HTTP, "plain.example.test", "/", 200)
	mustGet(t, c, p.HTTP, "auto.example.test", "/", 404)
	p.Stop(e2eWait)
}

// TestACMEPebbleThroughFlags runs an ingress in this process, configured by the command
// line (--acme-ca, --acme-ca-root, --acme-agree, --state-dir), against Pebble: the ACME
// route gets a certificate that chains to Pebble's root, /readyz says so, and an HTTPS
// request is served with it.
func TestACMEPebbleThroughFlags(t *testing.T) {
	pebbletest.Binary(t) // skip (or fail in CI) first
	t.Parallel()
	peb := pebbletest.New(t, pebbletest.Options{})
	_, target := echoBackend(t, "backend", 0)
	dir := t.TempDir()
	file := filepath.Join(dir, "routes.json")
	const host = "auto.example.test"
	if err := os.WriteFile(file, binarytest.TableJSON(t, 1, nil, acmeRoute(host, true, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	o := defaultOptions()
	fs := o.flagSet("ingress", io.Discard)
	if err := parseFlags(fs, "", binarytest.BaseArgs("--routes", file, "--state-dir", filepath.Join(dir, "state"),
		"--acme-ca", peb.Directory, "--acme-ca-root", peb.ListenerRootsFile, "--acme-agree",
		"--acme-email", "ops@example.test"), nil); err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	if err := o.loadACMERoots(); err != nil {
		t.Fatal(err)
	}
	logs := &pebbletest.SyncBuffer{}
	in, err := newInstance(o, instanceDeps{log: newLogger("json", o.level, logs)})
	if err != nil {
		t.Fatal(err)
	}
	httpAddr, httpsAddr := in.proxy.Addrs()
	peb.Run(t, portNumber(t, httpAddr), portNumber(t, httpsAddr))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- in.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("run: %v", err)
		}
		if t.Failed() {
			t.Logf("ingress log:\n%s", logs.String())
		}
	})

	admin := in.adminAddr().String()
	testwait.UntilWhy(t, 60*time.Second, "the ACME certificate", func() (bool, string) {
		_, body := readyz(t, admin)
		return strings.Contains(body, "acme: 1 hostname(s), 1 with a valid certificate"), body
	})
	roots := peb.IssuingRoots(t)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", httpsAddr.String())
		},
	}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr, Timeout: e2eWait}).Get("https://" + host + "/hello")
	if err != nil {
		t.Fatalf("HTTPS with Pebble's root: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != "backend "+host+" /hello" {
		t.Errorf("HTTPS: %d %q", res.StatusCode, body)
	}
	if _, err := res.TLS.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: host, Roots: roots,
		Intermediates: intermediates(res.TLS.PeerCertificates)}); err != nil {
		t.Errorf("the served certificate does not chain to Pebble's root: %v", err)
	}
	// The certificate and the account key are under --state-dir.
	if matches, _ := filepath.Glob(filepath.Join(dir, "state", "acme", "certificates", "*", host, host+".crt")); len(matches) != 1 {
		t.Errorf("no certificate of %s under --state-dir/acme: %v", host, matches)
	}
}

func intermediates(chain []*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range chain[1:] {
		p.AddCert(c)
	}
	return p
}

// deadPort returns a loopback port nothing listens on (it was free a moment ago).
func deadPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func portNumber(t *testing.T, a net.Addr) int {
	t.Helper()
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		t.Fatalf("%v is not a TCP address", a)
	}
	return ta.Port
}

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/pebbletest"
	"github.com/serve-zone/ingress/internal/testwait"
)

// TestProxyACMERefused: `ingress proxy --acme` without what automatic HTTPS needs, or with
// what it cannot do, exits 2 before serving anything, one line naming each problem.
func TestProxyACMERefused(t *testing.T) {
	certFile, keyFile := filepath.Join(t.TempDir(), "q.crt"), filepath.Join(t.TempDir(), "q.key")
	state := filepath.Join(t.TempDir(), "state")
	base := []string{"proxy", "--from", "quick.example.test", "--to", ":3000", "--acme"}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"nothing", nil, []string{"--acme needs --state-dir DIR (where the certificates and the ACME account key are kept across restarts; or --acme-storage URL, where replicas share them), " +
			"--acme-email ADDRESS (the ACME account's contact, where the CA sends expiry notices), --acme-agree (agreeing to the CA's terms of service)"}},
		{"no agreement", []string{"--state-dir", state, "--acme-email", "ops@example.test"}, []string{"--acme needs --acme-agree (agreeing to the CA's terms of service)"}},
		{"no state dir", []string{"--acme-agree", "--acme-email", "ops@example.test"}, []string{"--acme needs --state-dir DIR"}},
		{"no email", []string{"--acme-agree", "--state-dir", state}, []string{"--acme needs --acme-email ADDRESS"}},
		{"no TLS listener", []string{"--acme-agree", "--state-dir", state, "--acme-email", "ops@example.test", "--https-addr="},
			[]string{"--acme needs --https-addr (the TLS listener that serves the certificate)"}},
		{"and files", []string{"--acme-agree", "--state-dir", state, "--acme-email", "ops@example.test", "--tls-cert", certFile, "--tls-key", keyFile},
			[]string{"--acme and --tls-cert/--tls-key both give the certificate: use one or the other"}},
		{"wildcard", []string{"--acme-agree", "--state-dir", state, "--acme-email", "ops@example.test", "--from", "*.example.test"},
			[]string{`--acme cannot obtain a certificate for --from "*.example.test": a wildcard needs the DNS-01 challenge`}},
		{"no challenge", []string{"--acme-agree", "--state-dir", state, "--acme-email", "ops@example.test", "--http-addr=", "--acme-challenges", "http-01"},
			[]string{"--acme (quick.example.test): automatic HTTPS needs a challenge it can answer (--acme-challenges http-01 needs --http-addr)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			args := append(append(append([]string{}, base...), "--http-addr", "127.0.0.1:0", "--https-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"), tc.args...)
			code := realMain(args, io.Discard, &stderr, func(string) (string, bool) { return "", false })
			if code != exitConfig {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitConfig, stderr.String())
			}
			assertContainsAll(t, strings.Join(args, " "), stderr.String(), tc.want...)
		})
	}
	// --redirect-http has TLS to redirect to with --acme alone.
	var stderr bytes.Buffer
	realMain([]string{"proxy", "--from", "quick.example.test", "--to", ":3000", "--redirect-http", "--admin-addr", ""}, io.Discard, &stderr,
		func(string) (string, bool) { return "", false })
	assertContainsAll(t, "--redirect-http without TLS", stderr.String(), "--redirect-http needs --acme, or --tls-cert and --tls-key")
}

// TestProxyACMEPebble runs `ingress proxy --acme` in this process against Pebble: one
// command line, and the hostname is served over HTTPS with a certificate that chains to
// Pebble's root, plain HTTP redirected to it; the certificate and the account key are kept
// under --state-dir, so that a second run serves the stored certificate with the CA gone.
func TestProxyACMEPebble(t *testing.T) {
	pebbletest.Binary(t) // skip (or fail in CI) first
	t.Parallel()
	peb := pebbletest.New(t, pebbletest.Options{})
	_, target := echoBackend(t, "backend", 0)
	state := filepath.Join(t.TempDir(), "state")
	const host = "quick.example.test"
	args := binarytest.BaseArgs("--from", host, "--to", target.Address+":"+strconv.Itoa(target.Port),
		"--acme", "--redirect-http", "--state-dir", state, "--acme-email", "ops@example.test", "--acme-agree",
		"--acme-ca", peb.Directory, "--acme-ca-root", peb.ListenerRootsFile)

	first := startProxy(t, args)
	httpAddr, httpsAddr := first.in.proxy.Addrs()
	peb.Run(t, portNumber(t, httpAddr), portNumber(t, httpsAddr))
	first.run(t)
	admin := first.in.adminAddr().String()
	testwait.UntilWhy(t, 60*time.Second, "the ACME certificate", func() (bool, string) {
		_, body := readyz(t, admin)
		return strings.Contains(body, "acme: 1 hostname(s), 1 with a valid certificate"), body
	})
	roots := peb.IssuingRoots(t)
	chain := httpsWithRoots(t, httpsAddr, host, roots)
	served := chain[0]
	if _, err := served.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, Intermediates: intermediates(chain)}); err != nil {
		t.Errorf("the served certificate does not chain to Pebble's root: %v", err)
	}
	r := mustGet(t, httpClient(t), httpAddr.String(), host, "/x", http.StatusPermanentRedirect)
	if loc := r.header.Get("Location"); !strings.HasPrefix(loc, "https://"+host) {
		t.Errorf("redirect to %q, want https://%s...", loc, host)
	}
	if matches, _ := filepath.Glob(filepath.Join(state, "acme", "certificates", "*", host, host+".crt")); len(matches) != 1 {
		t.Errorf("no certificate of %s under --state-dir/acme: %v", host, matches)
	}
	first.stop(t)

	// The CA is gone; the same command line serves the stored certificate at once.
	peb.Stop()
	second := startProxy(t, args)
	second.run(t)
	_, httpsAddr = second.in.proxy.Addrs()
	again := httpsWithRoots(t, httpsAddr, host, roots)[0]
	if again.SerialNumber.Cmp(served.SerialNumber) != 0 {
		t.Errorf("after a restart the served certificate is %s, want the stored %s", again.SerialNumber, served.SerialNumber)
	}
	second.stop(t)
}

// proxyRun is one `ingress proxy` instance of a test, built but perhaps not yet running.
type proxyRun struct {
	in     *instance
	logs   *pebbletest.SyncBuffer
	done   func()
	cancel context.CancelFunc
	ran    chan error
}

// startProxy builds the instance of `ingress proxy` args (listeners bound, route applied)
// and fails the test when the command line is refused.
func startProxy(t *testing.T, args []string) *proxyRun {
	t.Helper()
	p := &proxyRun{logs: &pebbletest.SyncBuffer{}}
	in, done, err := newProxyInstance(args, p.logs, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("ingress proxy %s: %v\n%s", strings.Join(args, " "), err, p.logs.String())
	}
	p.in, p.done = in, done
	t.Cleanup(func() {
		if p.ran != nil {
			p.stop(t)
			return
		}
		_ = in.proxy.Shutdown(context.Background()) // built, never run
		if in.adminLn != nil {
			_ = in.adminLn.Close()
		}
		done()
	})
	return p
}

// run runs the instance until stop.
func (p *proxyRun) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.ran = cancel, make(chan error, 1)
	go func() { p.ran <- p.in.run(ctx) }()
}

// stop ends the run (once) and fails the test if it did not end gracefully.
func (p *proxyRun) stop(t *testing.T) {
	t.Helper()
	if p.ran == nil || p.cancel == nil {
		return
	}
	p.cancel()
	p.cancel = nil
	if err := <-p.ran; err != nil {
		t.Errorf("run: %v", err)
	}
	p.done()
	if t.Failed() {
		t.Logf("ingress log:\n%s", p.logs.String())
	}
}

// httpsWithRoots sends GET https://host/hello to addr, trusting only roots, and returns
// the chain it was served with, the leaf first; the backend must answer.
func httpsWithRoots(t *testing.T, addr net.Addr, host string, roots *x509.CertPool) []*x509.Certificate {
	t.Helper()
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr.String())
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
	return res.TLS.PeerCertificates
}

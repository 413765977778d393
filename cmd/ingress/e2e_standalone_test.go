package main

import (
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testcert"
	"github.com/serve-zone/ingress/routetable"
)

// httpsGet sends GET https://addr/ with SNI and Host host, checks that the certificate
// served covers host, and returns the status and negotiated protocol.
func httpsGet(t *testing.T, addr, host string) (int, string) {
	t.Helper()
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{ServerName: host, InsecureSkipVerify: true},
		ForceAttemptHTTP2: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/tls", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := (&http.Client{Transport: tr, Timeout: e2eWait}).Do(req)
	if err != nil {
		t.Fatalf("GET https://%s/tls (SNI %s): %v", addr, host, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		t.Fatal("no TLS state")
	}
	if err := resp.TLS.PeerCertificates[0].VerifyHostname(host); err != nil {
		t.Fatalf("served certificate does not cover %s: %v", host, err)
	}
	if want := "backend " + host + " /tls"; resp.StatusCode == http.StatusOK && string(body) != want {
		t.Fatalf("body %q, want %q", body, want)
	}
	return resp.StatusCode, resp.Proto
}

// TestE2EStandalone runs the binary on a routes file: plain and TLS routes, reloads on
// change, an invalid edit that keeps the old table, a same-revision edit that applies,
// and a SIGHUP reload of an edit the file watcher cannot see.
func TestE2EStandalone(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	_, target := echoBackend(t, "backend", 0)
	const (
		plain  = "plain.example.test"
		secure = "secure.example.test"
	)
	certPEM, keyPEM, err := testcert.Generate(secure)
	if err != nil {
		t.Fatal(err)
	}
	certs := []routetable.Certificate{{ID: "cert-1", CertificatePEM: certPEM, PrivateKeyPEM: keyPEM}}
	routes := []routetable.Route{binarytest.Route(plain, "", false, target), binarytest.Route(secure, "cert-1", false, target)}
	with := func(extra ...string) []routetable.Route {
		out := append([]routetable.Route(nil), routes...)
		for _, h := range extra {
			out = append(out, binarytest.Route(h, "", false, target))
		}
		return out
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "routes.json")
	if err := os.WriteFile(file, binarytest.TableJSON(t, 1, certs, with()...), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startIngress(t, nil, binarytest.BaseArgs("--routes", file)...)
	c := httpClient(t)
	waitStatus(t, c, p.Admin, "", "/readyz", http.StatusOK)

	mustGet(t, c, p.HTTP, plain, "/", http.StatusOK)
	mustGet(t, c, p.HTTP, secure, "/", http.StatusOK) // redirectHttp false: plain HTTP served too
	if status, proto := httpsGet(t, p.HTTPS, secure); status != http.StatusOK || proto != "HTTP/2.0" {
		t.Fatalf("HTTPS %s = %d over %s, want 200 over HTTP/2.0", secure, status, proto)
	}

	// A new revision with another hostname is picked up by the watcher.
	binarytest.WriteFileAtomic(t, file, binarytest.TableJSON(t, 2, certs, with("new.example.test")...))
	waitStatus(t, c, p.HTTP, "new.example.test", "/", http.StatusOK)

	// An invalid file: every violation logged, nothing of it applied.
	bad := with("new.example.test", "refused.example.test")
	bad[0].Targets = []routetable.Target{{LeaseID: "lease-x", Address: target.Address, Port: 0}}
	binarytest.WriteFileAtomic(t, file, binarytest.TableJSON(t, 3, certs, bad...))
	p.WaitLine(e2eWait, func(m map[string]any) bool {
		v, _ := m["violation"].(string)
		return m["msg"] == "route table violation" && strings.Contains(v, "targets[0].port")
	})
	mustGet(t, c, p.HTTP, "new.example.test", "/", http.StatusOK)
	mustGet(t, c, p.HTTP, "refused.example.test", "/", http.StatusNotFound)
	mustGet(t, c, p.HTTP, plain, "/", http.StatusOK)

	// Same revision as the applied one, different content: applied (contract §7).
	binarytest.WriteFileAtomic(t, file, binarytest.TableJSON(t, 2, certs, with("new.example.test", "same.example.test")...))
	waitStatus(t, c, p.HTTP, "same.example.test", "/", http.StatusOK)

	// SIGHUP: rewrite the file in place through a hard link in another directory. The
	// watcher watches the routes file's directory, and inotify reports a write to the
	// directory the file was opened through, so only SIGHUP can bring this edit in.
	//
	// The edit stays unseen. The binary logs no line for the events it ignores, so the
	// test watches the directory itself, as the binary does: a file written next to the
	// routes file after the edit is the watch's next event (inotify keeps one watch's
	// events in order), and no event for the routes file may come before it.
	dirWatch, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer dirWatch.Close()
	if err := dirWatch.Add(filepath.Dir(file)); err != nil {
		t.Fatal(err)
	}
	seen := p.LineCount()
	alias := filepath.Join(t.TempDir(), "alias.json")
	if err := os.Link(file, alias); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alias, binarytest.TableJSON(t, 4, certs, with("new.example.test", "hup.example.test")...), 0o600); err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(filepath.Dir(file), "probe.txt")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(e2eWait)
	for probed := false; !probed; {
		select {
		case ev := <-dirWatch.Events:
			if ev.Name == file {
				t.Fatalf("inotify reported the edit made through another directory: %v", ev)
			}
			probed = ev.Name == probe
		case err := <-dirWatch.Errors:
			t.Fatal(err)
		case <-timeout:
			t.Fatalf("no event for %s within %s", probe, e2eWait)
		}
	}
	mustGet(t, c, p.HTTP, "hup.example.test", "/", http.StatusNotFound)
	p.Signal(syscall.SIGHUP)
	p.WaitLine(e2eWait, func(m map[string]any) bool { return m["msg"] == "SIGHUP: reloading the routes file" })
	waitStatus(t, c, p.HTTP, "hup.example.test", "/", http.StatusOK)
	mustGet(t, c, p.HTTP, "same.example.test", "/", http.StatusNotFound)
	// SIGHUP, not the watcher, brought the edit in.
	if m := p.FindLine(seen, func(m map[string]any) bool { return m["msg"] == "routes file changed: reloading after the debounce" }); m != nil {
		t.Fatalf("the watcher saw the edit made through another directory: %v", m)
	}

	p.Stop(e2eWait)
	for _, line := range strings.Split(keyPEM, "\n") {
		if len(line) > 20 && !strings.HasPrefix(line, "-----") {
			p.AssertNoSecret(line)
		}
	}
}

// TestE2EStandaloneInvalidAtStart: a routes file refused at start stops the binary with
// exit status 2 and names every violation.
func TestE2EStandaloneInvalidAtStart(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	target := routetable.Target{LeaseID: "lease-1", Address: "127.0.0.1", Port: 8080}
	bad := []routetable.Route{
		binarytest.Route("Bad.Example.test", "", false, target),
		binarytest.Route("ok.example.test", "cert-missing", false, routetable.Target{LeaseID: "lease-2", Address: "127.000.0.1", Port: 8080}),
	}
	file := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(file, binarytest.TableJSON(t, 1, nil, bad...), 0o600); err != nil {
		t.Fatal(err)
	}
	p := execIngress(t, nil, binarytest.BaseArgs("--routes", file)...)
	if code := p.Wait(e2eWait); code != exitConfig {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitConfig, p.Stderr())
	}
	out := p.Stderr()
	for _, want := range []string{"routes[0].hostname", "routes[1].targets[0].address", "routes[1].tls.certificateId", file} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr does not name %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ingress started") {
		t.Errorf("the ingress started on a refused file:\n%s", out)
	}
}

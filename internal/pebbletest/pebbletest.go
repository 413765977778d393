// Package pebbletest runs Pebble, Let's Encrypt's ACME test server, for the tests of
// automatic HTTPS: on loopback only, started by the test itself, its validation ports
// pointed at the listeners under test, and every name it validates resolving to 127.0.0.1
// through a tiny DNS server of its own.
//
// The binary is found through $PEBBLE, then PATH, then $GOPATH/bin (.ci/run installs the
// pinned version, see Version). Without it a test is skipped with the reason, unless CI is
// set: then a missing Pebble fails the test, so that CI cannot pass by skipping.
package pebbletest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/serve-zone/ingress/internal/testcert"
	"github.com/serve-zone/ingress/internal/toolbin"
)

// Version is the Pebble release .ci/run installs:
//
//	go install github.com/letsencrypt/pebble/v2/cmd/pebble@v2.10.3
const Version = "v2.10.3"

// Options describe one Pebble.
type Options struct {
	// HTTPPort and TLSPort are where Pebble's validation authority sends HTTP-01 and
	// TLS-ALPN-01 validations (on 127.0.0.1, where every name resolves).
	HTTPPort, TLSPort int
	// Validity is the lifetime of the certificates it issues; zero means 90 days.
	Validity time.Duration
}

// Pebble is one running Pebble.
type Pebble struct {
	// Directory is the ACME directory URL (https://localhost:port/dir).
	Directory string
	// ListenerRoots trusts Pebble's own HTTPS endpoints; ListenerRootsFile holds the same
	// certificate as PEM (for --acme-ca-root).
	ListenerRoots     *x509.CertPool
	ListenerRootsFile string

	bin, dir, keyFile  string
	validity           int64
	listen, mgmtListen string // 127.0.0.1:port of the ACME and management endpoints
	mgmt               string // management API, localhost:port
	dns                string // the DNS server's address

	cmd  *exec.Cmd // nil until run
	out  *SyncBuffer
	done chan struct{}
}

// Binary returns the path of the pebble binary, skipping the test (or failing it when the
// CI variable is set) when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	return toolbin.Tool{
		Name:    "pebble",
		Env:     "PEBBLE",
		About:   "(ACME test server)",
		Install: "github.com/letsencrypt/pebble/v2/cmd/pebble@" + Version,
	}.Find(t)
}

// New prepares a Pebble for the test without starting it: its directory URL and the
// certificate of its HTTPS endpoints are known (to configure the client under test)
// before the validation ports are. Start runs it.
func New(t testing.TB, o Options) *Pebble {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	certPEM, keyPEM, err := testcert.Generate("localhost")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, keyPEM)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(certPEM))
	validity := int64(o.Validity / time.Second)
	if validity <= 0 {
		validity = 90 * 24 * 3600
	}
	p := &Pebble{
		ListenerRoots:     roots,
		ListenerRootsFile: certFile,
		bin:               bin,
		dir:               dir,
		keyFile:           keyFile,
		validity:          validity,
		out:               &SyncBuffer{},
	}
	p.pickPorts(t)
	t.Cleanup(p.Stop)
	return p
}

func (p *Pebble) pickPorts(t testing.TB) {
	p.listen, p.mgmtListen = freePort(t), freePort(t)
	p.Directory = "https://localhost:" + portOf(p.listen) + "/dir"
	p.mgmt = "localhost:" + portOf(p.mgmtListen)
}

// Start runs a Pebble for the test (New, then Run), choosing other ports for its own
// endpoints if the first ones were taken meanwhile; it is stopped by the test's cleanup.
func Start(t testing.TB, o Options) *Pebble {
	t.Helper()
	p := New(t, o)
	var err error
	for try := 0; try < 3; try++ {
		if err = p.run(t, o.HTTPPort, o.TLSPort); err == nil {
			return p
		}
		if !strings.Contains(p.out.String(), "address already in use") {
			break
		}
		p.pickPorts(t)
	}
	t.Fatalf("pebble did not start: %v", err)
	return nil
}

// Run starts the Pebble New prepared, its validations sent to 127.0.0.1 at httpPort
// (HTTP-01) and tlsPort (TLS-ALPN-01), and waits until it answers.
func (p *Pebble) Run(t testing.TB, httpPort, tlsPort int) {
	t.Helper()
	if err := p.run(t, httpPort, tlsPort); err != nil {
		t.Fatalf("pebble did not start: %v", err)
	}
}

func (p *Pebble) run(t testing.TB, httpPort, tlsPort int) error {
	t.Helper()
	if p.dns == "" {
		p.dns = startDNS(t)
	}
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":           p.listen,
		"managementListenAddress": p.mgmtListen,
		"certificate":             p.ListenerRootsFile,
		"privateKey":              p.keyFile,
		"httpPort":                httpPort,
		"tlsPort":                 tlsPort,
		"ocspResponderURL":        "",
		"keyAlgorithm":            "ecdsa",
		"retryAfter":              map[string]int{"authz": 1, "order": 1},
		"profiles": map[string]any{"default": map[string]any{
			"description": "the tests' profile", "validityPeriod": p.validity,
		}},
	}}
	b, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(p.dir, "pebble-config.json")
	writeFile(t, cfgFile, string(b))
	p.Stop()
	p.out = &SyncBuffer{}
	p.done = make(chan struct{})
	p.cmd = exec.Command(p.bin, "-config", cfgFile, "-dnsserver", p.dns)
	p.cmd.Env = append(os.Environ(),
		"PEBBLE_VA_NOSLEEP=1",      // validate at once
		"PEBBLE_WFE_NONCEREJECT=0", // no spurious "badNonce" errors
		"PEBBLE_AUTHZREUSE=0",      // every order proves its names again
	)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start pebble: %w", err)
	}
	cmd, done := p.cmd, p.done
	go func() { _ = cmd.Wait(); close(done) }()
	if err := p.waitUp(15 * time.Second); err != nil {
		p.Stop()
		return err
	}
	return nil
}

// waitUp polls the directory until Pebble answers, or it exits, or limit passes.
func (p *Pebble) waitUp(limit time.Duration) error {
	c := p.client()
	deadline := time.Now().Add(limit)
	for {
		res, err := c.Get(p.Directory)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("pebble exited:\n%s", p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer from %s within %s: %v\n%s", p.Directory, limit, err, p.out.String())
		}
	}
}

func (p *Pebble) client() *http.Client {
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.ListenerRoots}},
	}
}

// IssuingRoots fetches the root Pebble signs with (it makes a new one at every start)
// from its management API.
func (p *Pebble) IssuingRoots(t testing.TB) *x509.CertPool {
	t.Helper()
	res, err := p.client().Get("https://" + p.mgmt + "/roots/0")
	if err != nil {
		t.Fatalf("pebble root: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("pebble root: HTTP %d, %v", res.StatusCode, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("pebble root: no PEM certificate in %q", b)
	}
	return pool
}

// Output returns what Pebble printed so far.
func (p *Pebble) Output() string { return p.out.String() }

// Stop ends Pebble and waits for it; the CA is unreachable afterwards.
func (p *Pebble) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// startDNS answers every A query with 127.0.0.1 and every other query with no record, over
// TCP (Pebble's -dnsserver client uses TCP); it returns its address.
func startDNS(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				stop := context.AfterFunc(ctx, func() { c.Close() })
				defer stop()
				defer c.Close()
				serveDNS(c)
			})
		}
	})
	return ln.Addr().String()
}

func serveDNS(c net.Conn) {
	for {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		var q dnsmessage.Message
		if err := q.Unpack(msg); err != nil || len(q.Questions) != 1 {
			return
		}
		ans := dnsmessage.Message{
			Header:    dnsmessage.Header{ID: q.Header.ID, Response: true, Authoritative: true, RecursionAvailable: true},
			Questions: q.Questions,
		}
		qq := q.Questions[0]
		if qq.Type == dnsmessage.TypeA {
			ans.Answers = []dnsmessage.Resource{{
				Header: dnsmessage.ResourceHeader{Name: qq.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 1},
				Body:   &dnsmessage.AResource{A: [4]byte{127, 0, 0, 1}},
			}}
		}
		out, err := ans.Pack()
		if err != nil {
			return
		}
		binary.BigEndian.PutUint16(l[:], uint16(len(out)))
		if _, err := c.Write(append(l[:], out...)); err != nil {
			return
		}
	}
}

// freePort returns a loopback "127.0.0.1:port" that was free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// Port returns the port number of a bound address.
func Port(t testing.TB, a net.Addr) int {
	t.Helper()
	_, p, err := net.SplitHostPort(a.String())
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writeFile(t testing.TB, name, data string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// SyncBuffer is a bytes.Buffer safe for a process's (or a logger's) writers and a
// test's readers at once.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

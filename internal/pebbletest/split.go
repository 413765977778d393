package pebbletest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testcert"
)

// Validation is one connection of Pebble's validation authority, as the Splitter saw it.
type Validation struct {
	// Kind is "http-01" or "tls-alpn-01".
	Kind string
	// Name is what it validates: the Host of the HTTP-01 request, the server name of the
	// TLS-ALPN-01 hello.
	Name string
	// To is where the Splitter sent it ("" when Route refused).
	To string
}

// Splitter stands between Pebble's validation authority and several ingresses that share
// one certificate store: it reads the name each validation is for and forwards the
// connection, its bytes unchanged, to the address Route picks (an ingress's plain
// listener for HTTP-01, its TLS listener for TLS-ALPN-01). Start Pebble with HTTPPort and
// TLSPort. It stops at the test's cleanup.
type Splitter struct {
	HTTPPort, TLSPort int

	route func(Validation) (string, error)
	ctx   context.Context
	wg    sync.WaitGroup

	mu   sync.Mutex
	seen []Validation
}

// NewSplitter listens on two loopback ports; route picks the address of each validation
// (it may block for a while: each connection has its own goroutine); an error drops the
// connection, which fails that validation.
func NewSplitter(t testing.TB, route func(Validation) (string, error)) *Splitter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Splitter{route: route, ctx: ctx}
	var lns []net.Listener
	for _, kind := range []string{"http-01", "tls-alpn-01"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		if kind == "http-01" {
			s.HTTPPort = ln.Addr().(*net.TCPAddr).Port
		} else {
			s.TLSPort = ln.Addr().(*net.TCPAddr).Port
		}
		s.wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				s.wg.Go(func() { s.serve(kind, c) })
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		for _, ln := range lns {
			ln.Close()
		}
		s.wg.Wait()
	})
	return s
}

// Validations returns every validation seen so far.
func (s *Splitter) Validations() []Validation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Validation(nil), s.seen...)
}

func (s *Splitter) serve(kind string, c net.Conn) {
	stop := context.AfterFunc(s.ctx, func() { c.Close() })
	defer stop()
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var head []byte
	var name string
	var err error
	if kind == "http-01" {
		head, name, err = readHTTPHead(c)
	} else {
		head, name, err = readHello(c)
	}
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	v := Validation{Kind: kind, Name: name}
	to, err := s.route(v)
	if err == nil {
		v.To = to
	}
	s.mu.Lock()
	s.seen = append(s.seen, v)
	s.mu.Unlock()
	if err != nil {
		return
	}
	b, err := net.DialTimeout("tcp", to, 5*time.Second)
	if err != nil {
		return
	}
	stopB := context.AfterFunc(s.ctx, func() { b.Close() })
	defer stopB()
	defer b.Close()
	if _, err := b.Write(head); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(c, b)
		c.Close()
		close(done)
	}()
	_, _ = io.Copy(b, c)
	b.Close()
	<-done
}

// readHTTPHead reads a request head and returns its bytes and its Host (port removed).
func readHTTPHead(c net.Conn) ([]byte, string, error) {
	var buf []byte
	tmp := make([]byte, 4096)
	for !bytes.Contains(buf, []byte("\r\n\r\n")) {
		if len(buf) > 64<<10 {
			return nil, "", errors.New("head too long")
		}
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if err != nil {
			return nil, "", err
		}
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(buf)))
	if err != nil {
		return nil, "", err
	}
	host := req.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return buf, strings.ToLower(host), nil
}

// readHello reads a TLS ClientHello (through crypto/tls, which stops once it has the
// server name; nothing is written back) and returns its bytes and the server name.
func readHello(c net.Conn) ([]byte, string, error) {
	rc := &recordingConn{Conn: c}
	var name string
	errGot := errors.New("got the hello")
	err := tls.Server(rc, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name = h.ServerName
		return nil, errGot
	}}).Handshake()
	if name == "" {
		return nil, "", err
	}
	return rc.read.Bytes(), strings.ToLower(name), nil
}

// recordingConn keeps what is read and drops what is written (the alert that ends the
// aborted handshake).
type recordingConn struct {
	net.Conn
	read bytes.Buffer
}

func (r *recordingConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.read.Write(p[:n])
	return n, err
}

func (r *recordingConn) Write(p []byte) (int, error) { return len(p), nil }

// Front is an HTTPS reverse proxy in front of Pebble's ACME endpoint that counts the
// orders placed for each name, read from the payload of every newOrder request (Pebble
// does not log the names of an order). Clients use Directory and trust RootsFile.
type Front struct {
	// Directory is the ACME directory URL through the front.
	Directory string
	// RootsFile is the PEM certificate of the front's HTTPS endpoint (--acme-ca-root);
	// Roots the same as a pool.
	RootsFile string
	Roots     *x509.CertPool

	mu     sync.Mutex
	orders map[string]int
}

// Front starts a Front for the running Pebble; the test's cleanup stops it.
func (p *Pebble) Front(t testing.TB) *Front {
	t.Helper()
	certPEM, keyPEM, err := testcert.Generate("localhost")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		t.Fatal(err)
	}
	f := &Front{orders: map[string]int{}, RootsFile: filepath.Join(t.TempDir(), "front.pem"), Roots: x509.NewCertPool()}
	f.Roots.AppendCertsFromPEM([]byte(certPEM))
	if err := os.WriteFile(f.RootsFile, []byte(certPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	target := &url.URL{Scheme: "https", Host: p.listen}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host // Pebble builds its URLs from the Host: they name the front
		},
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.ListenerRoots, ServerName: "localhost"}},
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/order-plz") {
			body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			f.count(body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		rp.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{kp}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	f.Directory = "https://localhost:" + port + "/dir"
	return f
}

// count records the names of a newOrder request's JWS payload.
func (f *Front) count(body []byte) {
	var jws struct {
		Payload string `json:"payload"`
	}
	if json.Unmarshal(body, &jws) != nil {
		return
	}
	raw, err := base64.RawURLEncoding.DecodeString(jws.Payload)
	if err != nil {
		return
	}
	var order struct {
		Identifiers []struct {
			Value string `json:"value"`
		} `json:"identifiers"`
	}
	if json.Unmarshal(raw, &order) != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range order.Identifiers {
		f.orders[strings.ToLower(id.Value)]++
	}
}

// Orders returns how many orders named name so far.
func (f *Front) Orders(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.orders[name]
}

// AllOrders returns the number of orders per name so far.
func (f *Front) AllOrders() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.orders))
	for k, v := range f.orders {
		out[k] = v
	}
	return out
}

package reliability

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/internal/toolbin"
	"github.com/serve-zone/ingress/routetable"
)

// The ingress behind a real TCP load balancer (issue 36): Debian's HAProxy in mode tcp,
// sending the PROXY protocol (send-proxy-v2 and send-proxy) to the built binary's plain
// and TLS listeners, with HTTP health checks that carry a PROXY header of their own.
// Clients connect to HAProxy from addresses of their own (127.0.1.x); HAProxy connects to
// the ingress from 127.0.0.1, the one --proxy-protocol-from address.

const (
	lbPlainHost = "pp.rel.test"
	lbTLSHost   = "pps.rel.test"
)

// haproxyPath finds haproxy ($HAPROXY, else on PATH); without it the test is skipped,
// or fails when CI is set (.ci/run installs Debian's haproxy as root).
func haproxyPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HAPROXY"); p != "" {
		return p
	}
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	toolbin.Missing(t, "the load-balancer test needs haproxy: apt-get install haproxy (.ci/run does as root)")
	return ""
}

// balancer is a running HAProxy: its frontends by name, and its stats socket.
type balancer struct {
	front map[string]string // frontend name -> "127.0.0.1:port"
	sock  string
}

// lbFrontends are HAProxy's frontends: each relays to one ingress listener with one
// PROXY protocol version.
var lbFrontends = []struct {
	name   string
	tls    bool
	option string // the server line's PROXY option
}{
	{"plain_v2", false, "send-proxy-v2"},
	{"plain_v1", false, "send-proxy"},
	{"tls_v2", true, "send-proxy-v2"},
	{"tls_v1", true, "send-proxy"},
}

// startHAProxy runs HAProxy in front of the ingress's plain and TLS listeners and waits
// until every frontend accepts; the cleanup stops it.
func startHAProxy(t *testing.T, p *proc) *balancer {
	t.Helper()
	bin := haproxyPath(t)
	dir := t.TempDir()
	lb := &balancer{front: map[string]string{}, sock: filepath.Join(dir, "admin.sock")}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, `global
    maxconn 4000
    stats socket %s mode 600 level admin
defaults
    mode tcp
    maxconn 4000
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout check 5s
`, lb.sock)
	for _, f := range lbFrontends {
		ln := listen(t) // a free port, given to HAProxy
		addr := ln.Addr().String()
		ln.Close()
		lb.front[f.name] = addr
		target, host, check := p.HTTP, lbPlainHost, "check check-send-proxy"
		if f.tls {
			target, host, check = p.HTTPS, lbTLSHost, "check check-send-proxy check-ssl verify none check-sni "+lbTLSHost
		}
		fmt.Fprintf(&cfg, `frontend %[1]s
    bind %[2]s
    default_backend %[1]s
backend %[1]s
    option httpchk
    http-check send meth GET uri /health ver HTTP/1.1 hdr Host %[3]s
    http-check expect status 200
    server ingress %[4]s %[5]s %[6]s inter 100ms fall 2 rise 1
`, f.name, addr, host, target, f.option, check)
	}
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var out lockedBuf
	cmd := exec.Command(bin, "-db", "-f", path)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(waitLimit):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	for name, addr := range lb.front {
		testwait.UntilWhy(t, waitLimit, "HAProxy's "+name+" frontend accepting", func() (bool, string) {
			select {
			case <-done:
				t.Fatalf("haproxy exited:\n%s", out.String())
			default:
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return false, err.Error()
			}
			c.Close()
			return true, ""
		})
	}
	return lb
}

// lockedBuf collects a child's output.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// checks returns each backend's server state and last check status from HAProxy's
// stats socket ("UP L7OK").
func (lb *balancer) checks() (map[string]string, error) {
	c, err := net.Dial("unix", lb.sock)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	if _, err := io.WriteString(c, "show stat\n"); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(b), "\n")
	col := map[string]int{}
	for i, h := range strings.Split(strings.TrimPrefix(lines[0], "# "), ",") {
		col[h] = i
	}
	for _, k := range []string{"pxname", "svname", "status", "check_status"} {
		if _, ok := col[k]; !ok {
			return nil, fmt.Errorf("show stat has no column %s: %q", k, lines[0])
		}
	}
	out := map[string]string{}
	for _, l := range lines[1:] {
		// The columns before check_status hold no commas (names, numbers, states).
		f := strings.Split(l, ",")
		if len(f) > col["check_status"] && f[col["svname"]] == "ingress" {
			out[f[col["pxname"]]] = f[col["status"]] + " " + f[col["check_status"]]
		}
	}
	return out, nil
}

// dialVia connects to addr from the local address from.
func dialVia(from, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: waitLimit}
	return d.Dial("tcp", addr)
}

// seenClient is the target of the balancer test: it answers with the forwarding
// fields it got.
func seenClient(t *testing.T) routetable.Target {
	t.Helper()
	ln := listen(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-For", r.Header.Get("X-Forwarded-For"))
		w.Header().Set("X-Seen-Forwarded", r.Header.Get("Forwarded"))
		w.Header().Set("X-Seen-Proto", r.Header.Get("X-Forwarded-Proto"))
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return binarytest.TargetOf(t, ln.Addr().String(), "lease-seen")
}

// lbClient is an HTTP client of frontend f whose connections come from the local
// address from; h2 speaks HTTP/2 (h2c with prior knowledge on plain frontends).
func lbClient(t *testing.T, lb *balancer, name string, secure, h2 bool, from string) *http.Client {
	var p http.Protocols
	switch {
	case h2 && secure:
		p.SetHTTP2(true)
	case h2:
		p.SetUnencryptedHTTP2(true)
	default:
		p.SetHTTP1(true)
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) { return dialVia(from, lb.front[name]) }
	tr := &http.Transport{Protocols: &p, DialContext: dial, DisableKeepAlives: false,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: lbTLSHost}}
	if secure {
		tr.DialTLSContext = func(ctx context.Context, n, a string) (net.Conn, error) {
			c, err := dial(ctx, n, a)
			if err != nil {
				return nil, err
			}
			next := "http/1.1"
			if h2 {
				next = "h2"
			}
			tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: lbTLSHost, NextProtos: []string{next}})
			return tc, tc.HandshakeContext(ctx)
		}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitLimit}
}

// TestBehindHAProxy: through HAProxy (send-proxy-v2 and send-proxy, plain and TLS,
// HTTP/1.1 and HTTP/2), the target sees each client's own address in X-Forwarded-For
// and Forwarded and the access log names it; 600 connections from two client addresses
// are all served under --max-conns-per-client 400; an HTTP/2 flood from a third client
// ends that client's connections only and penalises it alone; HAProxy's HTTP checks
// (with their own PROXY header) keep every server up; and a PROXY header sent directly
// from an address outside --proxy-protocol-from is not honoured.
func TestBehindHAProxy(t *testing.T) {
	certPEM, keyPEM := keyPair(t, lbTLSHost)
	target := seenClient(t)
	p, _ := standalone(t, binarytest.TableJSON(t, 1, []routetable.Certificate{{ID: "c", CertificatePEM: certPEM, PrivateKeyPEM: keyPEM}},
		binarytest.Route(lbPlainHost, "", false, target), binarytest.Route(lbTLSHost, "c", false, target)),
		"--proxy-protocol-from", "127.0.0.1/32", "--max-conns-per-client", "400", "--access-log", "--log-level", "info")
	lb := startHAProxy(t, p)

	t.Run("client address", func(t *testing.T) {
		for i, f := range lbFrontends {
			for _, h2 := range []bool{false, true} {
				from := fmt.Sprintf("127.0.1.%d", 10+i)
				host, scheme := lbPlainHost, "http"
				if f.tls {
					host, scheme = lbTLSHost, "https"
				}
				path := fmt.Sprintf("/who/%s/h2=%v", f.name, h2)
				res, err := lbClient(t, lb, f.name, f.tls, h2, from).Get(scheme + "://" + host + path)
				if err != nil {
					t.Fatalf("%s h2=%v: %v", f.name, h2, err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK || res.Header.Get("X-Seen-For") != from ||
					!strings.Contains(res.Header.Get("X-Seen-Forwarded"), "for="+from+";") || (res.ProtoMajor == 2) != h2 {
					t.Fatalf("%s h2=%v from %s: %s %s, X-Forwarded-For %q, Forwarded %q", f.name, h2, from, res.Status, res.Proto,
						res.Header.Get("X-Seen-For"), res.Header.Get("X-Seen-Forwarded"))
				}
				line := p.WaitLine(waitLimit, func(m map[string]any) bool { return m["msg"] == "request" && m["path"] == path })
				if c, _ := line["client"].(string); !strings.HasPrefix(c, from+":") {
					t.Fatalf("%s h2=%v: the access log names %v, want %s", f.name, h2, line["client"], from)
				}
			}
		}
	})

	t.Run("600 connections from two clients", func(t *testing.T) {
		const perClient = 300
		var mu sync.Mutex
		var held []net.Conn
		var failed []error
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		for i := range 2 * perClient {
			from := []string{"127.0.1.1", "127.0.1.2"}[i%2]
			front := []string{"plain_v2", "plain_v1"}[i/2%2]
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				c, err := dialVia(from, lb.front[front])
				if err == nil {
					err = getVia(c, lbPlainHost, from)
				}
				mu.Lock()
				defer mu.Unlock()
				if c != nil {
					held = append(held, c)
				}
				if err != nil {
					failed = append(failed, fmt.Errorf("%s via %s: %w", from, front, err))
				}
			})
		}
		wg.Wait()
		t.Cleanup(func() {
			for _, c := range held {
				c.Close()
			}
		})
		if len(failed) > 0 {
			t.Fatalf("%d of %d connections failed, first: %v", len(failed), 2*perClient, failed[0])
		}
		m := scrape(t, p.Admin)
		if open := m.get(`ingress_open_connections{protocol="http1"}`); open < 2*perClient {
			t.Fatalf("%v HTTP/1.1 connections open, want the %d held", open, 2*perClient)
		}
		if n := m.get(`ingress_refusals_total{kind="connections"}`); n != 0 {
			t.Fatalf("%v connections refused", n)
		}
		// Each held connection still answers (asleep or awake).
		for _, c := range held[:10] {
			if err := getVia(c, lbPlainHost, ""); err != nil {
				t.Fatalf("a held connection: %v", err)
			}
		}
	})

	t.Run("one client's penalty", func(t *testing.T) {
		const bad, good = "127.0.1.3", "127.0.1.4"
		var before []net.Conn
		for _, from := range []string{bad, good} {
			c, err := dialVia(from, lb.front["plain_v2"])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := getVia(c, lbPlainHost, from); err != nil {
				t.Fatalf("%s before the flood: %v", from, err)
			}
			before = append(before, c)
		}
		abuse := scrape(t, p.Admin).get("ingress_client_abuse_total")
		fc, err := dialVia(bad, lb.front["plain_v1"])
		if err != nil {
			t.Fatal(err)
		}
		h2PingFlood(t, fc)
		testwait.UntilWhy(t, waitLimit, "the flood judged", func() (bool, string) {
			n := scrape(t, p.Admin).get("ingress_client_abuse_total")
			return n == abuse+1, fmt.Sprint(n)
		})
		p.WaitLine(waitLimit, func(m map[string]any) bool {
			return strings.Contains(fmt.Sprint(m["msg"]), "ended for abuse") && m["client"] == bad
		})
		_ = before[0].SetReadDeadline(time.Now().Add(waitLimit))
		if n, err := before[0].Read(make([]byte, 1)); n > 0 || err == nil || isNetTimeout(err) {
			t.Fatalf("the flooder's earlier connection: %d, %v; want it ended", n, err)
		}
		if err := getVia(before[1], lbPlainHost, good); err != nil {
			t.Fatalf("another client's connection after the flood: %v", err)
		}
		if c, err := dialVia(bad, lb.front["plain_v2"]); err == nil {
			if err := getVia(c, lbPlainHost, bad); err == nil {
				t.Fatal("the penalised client was served through the balancer")
			}
			c.Close()
		}
		c, err := dialVia(good, lb.front["tls_v2"])
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: lbTLSHost, NextProtos: []string{"http/1.1"}})
		defer tc.Close()
		if err := getVia(tc, lbTLSHost, good); err != nil {
			t.Fatalf("another client's new connection while the flooder is penalised: %v", err)
		}
	})

	t.Run("health checks keep the servers up", func(t *testing.T) {
		testwait.UntilWhy(t, waitLimit, "every server UP after an HTTP check", func() (bool, string) {
			st, err := lb.checks()
			if err != nil {
				return false, err.Error()
			}
			for _, f := range lbFrontends {
				if st[f.name] != "UP L7OK" {
					return false, fmt.Sprint(st)
				}
			}
			return true, ""
		})
		if n := scrape(t, p.Admin).get(`ingress_refusals_total{kind="proxy-protocol"}`); n != 0 {
			t.Fatalf("%v proxy-protocol refusals (HAProxy's checks among them?)", n)
		}
		for _, host := range []string{lbPlainHost, lbTLSHost} {
			line := p.WaitLine(waitLimit, func(m map[string]any) bool {
				return m["msg"] == "request" && m["path"] == "/health" && m["host"] == host
			})
			if c, _ := line["client"].(string); !strings.HasPrefix(c, "127.0.0.1:") {
				t.Fatalf("HAProxy's check of %s came from %v, want the balancer's own address", host, line["client"])
			}
		}
	})

	t.Run("a PROXY header from elsewhere", func(t *testing.T) {
		const from = "127.0.1.5"
		c, err := dialVia(from, p.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(waitLimit))
		fmt.Fprintf(c, "PROXY TCP4 198.51.100.7 127.0.0.1 40000 80\r\nGET / HTTP/1.1\r\nHost: %s\r\n\r\n", lbPlainHost)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != http.StatusBadRequest {
			t.Fatalf("a v1 header from %s: %v %v; want 400", from, res, err)
		}
		c2, err := dialVia(from, p.HTTPS)
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(&prefixed{Conn: c2, pre: []byte("PROXY TCP4 198.51.100.7 127.0.0.1 40000 443\r\n")},
			&tls.Config{InsecureSkipVerify: true, ServerName: lbTLSHost})
		defer tc.Close()
		_ = tc.SetDeadline(time.Now().Add(waitLimit))
		if err := tc.Handshake(); err == nil {
			t.Fatal("a TLS handshake after a PROXY header from elsewhere succeeded")
		}
		d, err := dialVia(from, p.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if err := getVia(d, lbPlainHost, from); err != nil {
			t.Fatalf("a plain request from %s: %v", from, err)
		}
	})
}

// getVia sends one GET for host on c and checks that the target saw wantFor in
// X-Forwarded-For ("": not checked).
func getVia(c net.Conn, host, wantFor string) error {
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	defer c.SetDeadline(time.Time{})
	if _, err := fmt.Fprintf(c, "GET /held HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
		return err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	switch {
	case res.StatusCode != http.StatusOK:
		return errors.New(res.Status)
	case wantFor != "" && res.Header.Get("X-Seen-For") != wantFor:
		return fmt.Errorf("X-Forwarded-For %q, want %q", res.Header.Get("X-Seen-For"), wantFor)
	}
	return nil
}

// h2PingFlood floods c with PINGs after the h2c preface until the ingress cuts it.
func h2PingFlood(t *testing.T, c net.Conn) {
	t.Helper()
	defer c.Close()
	go func() { _, _ = io.Copy(io.Discard, c) }()
	_ = c.SetWriteDeadline(time.Now().Add(waitLimit))
	fr := http2.NewFramer(c, c)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for range 1_000_000 {
		if err := fr.WritePing(false, [8]byte{1}); err != nil {
			if isNetTimeout(err) {
				t.Fatal("the ingress neither read nor cut the PING flood")
			}
			return
		}
	}
	t.Fatal("the ingress took a million PINGs")
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// prefixed sends pre in front of its first write.
type prefixed struct {
	net.Conn
	pre []byte
}

func (c *prefixed) Write(b []byte) (int, error) {
	if c.pre == nil {
		return c.Conn.Write(b)
	}
	p := append(c.pre, b...)
	c.pre = nil
	n, err := c.Conn.Write(p)
	return max(n-(len(p)-len(b)), 0), err
}

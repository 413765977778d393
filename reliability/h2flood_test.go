package reliability

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// The HTTP/2 floods attack whatever serves h2 on the listeners: prior-knowledge h2c on
// the plain one, h2 by ALPN on the TLS one. They speak raw frames (x/net/http2's Framer
// and hpack), so they do not depend on which server implementation answers.
//
// The attackers dial from loopback source addresses of their own (127.0.0.10 and up, one
// per flood and measurement; Linux routes all of 127/8 to lo), the legitimate client
// from 127.0.0.1: separating clients by address is what a real edge does, and what the
// binary's penalty for abusive addresses (proxy/penalize.go) keys on. Each flood has a
// fresh address so that no flood starts already penalised by the one before. The
// attackers run in a child process (runFloodProcess says why).

// h2Attacker is one raw HTTP/2 connection, written by one goroutine.
type h2Attacker struct {
	c   net.Conn
	fr  *http2.Framer // writes only
	enc *hpack.Encoder
	hb  bytes.Buffer
}

// dialH2 opens a connection (TLS with ALPN h2 when sni is set, else h2c with prior
// knowledge), sends the preface and settings, and, when read is set, reads and drops
// every frame the server sends until the connection ends (its settings are never
// acknowledged: an attacker need not).
func dialH2(from net.IP, addr, sni string, read bool, settings ...http2.Setting) (*h2Attacker, error) {
	var c net.Conn
	var err error
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}
	if sni != "" {
		c, err = tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err == nil && c.(*tls.Conn).ConnectionState().NegotiatedProtocol != "h2" {
			c.Close()
			return nil, fmt.Errorf("ALPN did not select h2")
		}
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	a := &h2Attacker{c: c, fr: http2.NewFramer(c, c)}
	a.enc = hpack.NewEncoder(&a.hb)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		c.Close()
		return nil, err
	}
	if err := a.fr.WriteSettings(settings...); err != nil {
		c.Close()
		return nil, err
	}
	if read {
		go func() { _, _ = io.Copy(io.Discard, c) }() // ends when the connection does
	}
	return a, nil
}

// headers encodes fields (pseudo-headers first) into a header block.
func (a *h2Attacker) headers(fields ...string) []byte {
	a.hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = a.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return bytes.Clone(a.hb.Bytes())
}

func getFields(host, path string) []string {
	return []string{":method", "GET", ":scheme", "http", ":authority", host, ":path", path}
}

// h2Flood runs conns attackers from the source address from, each redialling at once
// when the server closes or refuses its connection (as a real flood would), until ctx
// ends; flood writes on one connection until a write fails or ctx ends. It returns how
// many connections the server ended.
func h2Flood(ctx context.Context, from net.IP, addr, sni string, conns int, read bool, settings []http2.Setting, flood func(ctx context.Context, a *h2Attacker) error) int64 {
	var ended atomic.Int64
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				a, err := dialH2(from, addr, sni, read, settings...)
				if err != nil {
					continue
				}
				stop := context.AfterFunc(ctx, func() { a.c.Close() })
				err = flood(ctx, a)
				stop()
				a.c.Close()
				if err != nil && ctx.Err() == nil {
					ended.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return ended.Load()
}

// Hosts of TestH2Floods' routes.
const (
	floodLegit  = "legit.rel.test"
	floodBig    = "big.rel.test"
	floodSecure = "tls.rel.test"
)

// h2FloodKind is one kind of flood of TestH2Floods.
type h2FloodKind struct {
	name     string
	tls      bool // over TLS (ALPN h2) to floodSecure, else h2c to floodLegit
	read     bool
	settings []http2.Setting
	run      func(ctx context.Context, a *h2Attacker) error
	// benign: the flood is not judged abusive (a zero window is the client's right;
	// the send timeout cuts the stalled streams).
	benign bool
}

func rapidReset(ctx context.Context, a *h2Attacker) error {
	for id := uint32(1); ctx.Err() == nil; id += 2 {
		block := a.headers(getFields(floodLegit, "/")...)
		if err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
			return err
		}
		if err := a.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			return err
		}
	}
	return nil
}

var h2FloodKinds = []h2FloodKind{
	{name: "rapid reset h2c", read: true, run: rapidReset},
	{name: "rapid reset h2 over TLS", tls: true, read: true, run: rapidReset},
	{name: "CONTINUATION flood", read: true, run: func(ctx context.Context, a *h2Attacker) error {
		first := a.headers(getFields(floodLegit, "/")...)
		if err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndStream: true}); err != nil {
			return err
		}
		junk := a.headers("x-junk", strings.Repeat("j", 8000))
		for ctx.Err() == nil {
			if err := a.fr.WriteContinuation(1, false, junk); err != nil {
				return err
			}
		}
		return nil
	}},
	{name: "HPACK bomb", read: true, run: func(ctx context.Context, a *h2Attacker) error {
		// One 4 KiB value in the dynamic table, then requests that name it a thousand
		// times each (1 byte per reference: 4 MiB decoded per 1 KiB sent).
		seed := a.headers(append(getFields(floodLegit, "/"), "x-bomb", strings.Repeat("b", 4000))...)
		if err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: seed, EndStream: true, EndHeaders: true}); err != nil {
			return err
		}
		for id := uint32(3); ctx.Err() == nil; id += 2 {
			block := append(a.headers(getFields(floodLegit, "/")...), bytes.Repeat([]byte{0x80 | 62}, 1000)...)
			if err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
				return err
			}
		}
		return nil
	}},
	{name: "SETTINGS flood", read: false, run: func(ctx context.Context, a *h2Attacker) error {
		for ctx.Err() == nil {
			if err := a.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535}); err != nil {
				return err
			}
		}
		return nil
	}},
	{name: "PING flood", read: false, run: func(ctx context.Context, a *h2Attacker) error {
		for ctx.Err() == nil {
			if err := a.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
				return err
			}
		}
		return nil
	}},
	{name: "zero-window stall", read: true, benign: true, settings: []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 0}},
		run: func(ctx context.Context, a *h2Attacker) error {
			for id := uint32(1); id < 200 && ctx.Err() == nil; id += 2 {
				block := a.headers(getFields(floodBig, "/big")...)
				if err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
					return err
				}
			}
			<-ctx.Done() // the streams stall: no WINDOW_UPDATE ever
			return nil
		}},
}

// floodBound is the most the legitimate p99 may be during a flood (issue 16): 10x the
// quiet p99, but never less than floodFloor.
func floodBound(quiet time.Duration) time.Duration { return max(10*quiet, floodFloor) }

// floodFloor keeps the bound meaningful when the quiet p99 is tiny: on a shared 2-core
// machine, with the attacker's process on the same cores, one wake-up that waits for the
// kernel's scheduler (a few milliseconds: its latency target with a handful of runnable
// threads) lands in the p99 of a few hundred requests whatever the binary does. Quiet
// p99s here are 0.5-1 ms, so the floor binds only on a quiet machine faster than this
// one.
const floodFloor = 5 * time.Millisecond

// TestH2Floods: rapid reset (h2c and h2 over TLS), CONTINUATION floods, HPACK bombs,
// SETTINGS and PING floods and zero-window stalls: legitimate HTTP/1.1 requests never
// fail, their p99 during each flood stays within floodBound of the quiet one (issue 16;
// one second measurement is allowed; the figures are in bench/README.md), the floods
// that must be judged abusive are (and their address penalised: connections refused at
// accept), the attacker's own address is served again once its penalty is over, and the
// binary's goroutines and memory come back to their baseline.
func TestH2Floods(t *testing.T) {
	backend := echoBackend(t, "legit")
	// One body for every response: the zero-window stall asks for 400 of them at once,
	// and a megabyte allocated per request (400 MiB in this -race process, which also
	// runs the legitimate client) stalled the client for up to seconds in the collector.
	bigBody := bytes.Repeat([]byte("z"), 1<<20)
	bigSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(bigBody)
	})}
	ln := listen(t)
	go func() { _ = bigSrv.Serve(ln) }()
	t.Cleanup(func() { _ = bigSrv.Close() })
	certPEM, keyPEM := keyPair(t, floodSecure)
	p, _ := standalone(t, binarytest.TableJSON(t, 1, []routetable.Certificate{{ID: "c", CertificatePEM: certPEM, PrivateKeyPEM: keyPEM}},
		binarytest.Route(floodLegit, "", false, backend), binarytest.Route(floodBig, "", false, binarytest.TargetOf(t, ln.Addr().String(), "lease-big")),
		binarytest.Route(floodSecure, "c", false, backend)),
		"--client-send-timeout", "3s", "--log-level", "info")

	for i, f := range h2FloodKinds {
		t.Run(f.name, func(t *testing.T) {
			// Up to two more measurements when one is over the bound, each from a
			// fresh address: the machine is shared (in CI with the other packages'
			// tests), and a burst of someone else's work during the flood (or a quiet
			// window too lucky) must strike three times to fail the test. A server that
			// lets floods through is over the bound every time.
			const attempts = 3
			for attempt := range attempts {
				from := net.IPv4(127, 0, 0, byte(10+i+20*attempt))
				if floodWithinBound(t, p, i, from, attempt == attempts-1) {
					return
				}
				if attempt < attempts-1 {
					t.Logf("%s: over the bound; measuring again from a fresh address", f.name)
				}
			}
		})
	}
}

// floodWithinBound runs flood kind from the source address from under underAttack and
// reports whether the legitimate p99 stayed within floodBound; it fails the test then
// only when last is set. It also checks that the flood was judged abusive (and its
// address penalised) or, for a benign one, was not, and that the address is served
// again after its penalty.
func floodWithinBound(t *testing.T, p *proc, kind int, from net.IP, last bool) bool {
	t.Helper()
	f := h2FloodKinds[kind]
	before := scrape(t, p.Admin)
	var ended int64
	fig := underAttack(t, p, floodLegit, hostileDuration(), func(ctx context.Context) {
		ended = runFloodProcess(t, kind, p, from, hostileDuration())
	})
	after := scrape(t, p.Admin)
	abuse := after.get("ingress_client_abuse_total") - before.get("ingress_client_abuse_total")
	refused := after.get("ingress_penalized_connections_total") - before.get("ingress_penalized_connections_total")
	ratio := float64(fig.during.p99) / float64(max(fig.quiet.p99, 1))
	bound := floodBound(fig.quiet.p99)
	t.Logf("%s from %s: %d attacking connections ended by the server (%.0f for abuse), %.0f refused at accept; legitimate p99 %.1fx quiet (bound %s)\n\t%s",
		f.name, from, ended, abuse, refused, ratio, bound.Round(10*time.Microsecond), fig)
	within := fig.during.p99 <= bound
	if !within && last {
		t.Errorf("%s: legitimate p99 %s during the flood, %.1fx the quiet %s: over the bound %s (10x quiet, at least %s)",
			f.name, fig.during.p99, ratio, fig.quiet.p99, bound, floodFloor)
	}
	if !f.benign && (abuse == 0 || refused == 0) {
		t.Errorf("%s: %.0f connections ended for abuse and %.0f refused at accept; want both above 0", f.name, abuse, refused)
	}
	if f.benign && abuse > 0 {
		t.Errorf("%s: %.0f connections ended for abuse; want none", f.name, abuse)
	}
	// A penalty ends: the attacker's address is served again (penalties last 16 s at
	// most; a connection made during one is held until it ends, then reset).
	c := sourceClient(t, from)
	testwait.UntilWhy(t, 20*time.Second, "a request from the penalised address served after its penalty", func() (bool, string) {
		code, _, err := do(context.Background(), c, http.MethodGet, p.HTTP, floodLegit, "/")
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprintf("status %d", code)
	})
	return within
}

// The attackers of TestH2Floods run in a process of their own: this test binary again,
// told by floodEnv which flood to run (kind, address, source address, duration).
// Attackers are other machines or at least other processes in the world the bound is
// about: run as goroutines of the test process, their CPU-bound frame writing (under
// -race) took the processors of the very Go scheduler that wakes the legitimate
// client's goroutine, which then waited on the attackers rather than on the binary.
// As a process of their own they still share the machine's two cores with the binary
// and the legitimate client.
const floodEnv = "RELIABILITY_H2FLOOD_ATTACKER"

// runFloodProcess runs flood kind for dur from the source address from in a child
// process and returns how many attacking connections the server ended.
func runFloodProcess(t *testing.T, kind int, p *proc, from net.IP, dur time.Duration) int64 {
	t.Helper()
	addr := p.HTTP
	if h2FloodKinds[kind].tls {
		addr = p.HTTPS
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur+waitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %s %s %s", floodEnv, kind, addr, from, dur))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("flood process: %v\n%s", err, out.String())
	}
	var ended int64
	if _, err := fmt.Sscanf(out.String(), "ended %d", &ended); err != nil {
		t.Fatalf("flood process said %q", out.String())
	}
	return ended
}

// floodProcess is the child's side of runFloodProcess (TestMain calls it first): when
// floodEnv is set it runs the flood it names, prints "ended N" and returns true.
func floodProcess() bool {
	spec := os.Getenv(floodEnv)
	if spec == "" {
		return false
	}
	var kind int
	var addr, from, durText string
	_, err := fmt.Sscanf(spec, "%d %s %s %s", &kind, &addr, &from, &durText)
	dur, derr := time.ParseDuration(durText)
	if err != nil || derr != nil || kind < 0 || kind >= len(h2FloodKinds) {
		fmt.Println("bad", floodEnv, spec, err, derr)
		os.Exit(2)
	}
	f := h2FloodKinds[kind]
	sni := ""
	if f.tls {
		sni = floodSecure
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	fmt.Printf("ended %d\n", h2Flood(ctx, net.ParseIP(from), addr, sni, 4, f.read, f.settings, f.run))
	return true
}

// sourceClient is an HTTP/1.1 client whose connections leave from the address from.
func sourceClient(t *testing.T, from net.IP) *http.Client {
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}).DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitLimit}
}

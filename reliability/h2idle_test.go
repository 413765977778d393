package reliability

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// idleH2Conns is how many idle HTTP/2-over-TLS connections TestIdleH2TLSMemory holds.
const idleH2Conns = 10_000

// idleH2Budget is what idleH2Conns parked HTTP/2-over-TLS connections may hold of the
// binary's Go memory (heap objects and goroutine stacks) in all: issue 26's bound is
// 16 KB of RSS each.
const idleH2Budget = idleH2Conns * 16 << 10

// h2IdleClient is one HTTP/2-over-TLS client connection that keeps its HPACK tables.
type h2IdleClient struct {
	c    *tls.Conn
	fr   *http2.Framer
	hb   bytes.Buffer
	enc  *hpack.Encoder
	next uint32
}

// dialH2Idle opens an HTTP/2 connection over TLS to addr for host and sends the preface
// and SETTINGS.
func dialH2Idle(addr, host string) (*h2IdleClient, error) {
	c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: host, InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		return nil, err
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		c.Close()
		return nil, fmt.Errorf("ALPN %q", p)
	}
	h := &h2IdleClient{c: c, fr: http2.NewFramer(c, c), next: 1}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.enc = hpack.NewEncoder(&h.hb)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		c.Close()
		return nil, err
	}
	if err := h.fr.WriteSettings(); err != nil {
		c.Close()
		return nil, err
	}
	return h, nil
}

// get sends GET path for host and returns the answer's status and body.
func (h *h2IdleClient) get(host, path string) (string, string, error) {
	id := h.next
	h.next += 2
	h.hb.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", host}, {":path", path}, {"user-agent", "idle-h2/1"}} {
		_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	_ = h.c.SetDeadline(time.Now().Add(4 * waitLimit))
	defer func() { _ = h.c.SetDeadline(time.Time{}) }()
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		return "", "", err
	}
	var status string
	var body bytes.Buffer
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return status, body.String(), err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := h.fr.WriteSettingsAck(); err != nil {
					return "", "", err
				}
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				status = f.PseudoValue("status")
				if f.StreamEnded() {
					return status, body.String(), nil
				}
			}
		case *http2.DataFrame:
			if f.StreamID == id {
				body.Write(f.Data())
				if f.StreamEnded() {
					return status, body.String(), nil
				}
			}
		case *http2.RSTStreamFrame:
			return status, "", fmt.Errorf("stream reset %v", f.ErrCode)
		case *http2.GoAwayFrame:
			return status, "", fmt.Errorf("GOAWAY %v", f.ErrCode)
		}
	}
}

// eachH2 runs do for every index below n, 64 at a time, and returns the first error.
func eachH2(n int, do func(i int) error) error {
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs <- do(i)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// TestIdleH2TLSMemory: 10,000 HTTP/2-over-TLS connections that each served a request and
// now wait for the next park (proxy/internal/h2/park.go): under issue 26's 16 KB each of
// the binary's Go memory (heap and stacks) and no goroutine each; then every one answers
// a request of its own with its own answer.
func TestIdleH2TLSMemory(t *testing.T) {
	if lim := noFileLimit(t); lim < idleH2Conns+1000 {
		t.Fatalf("the descriptor limit is %d; this test needs %d in this process and in the binary (raise the hard limit: ulimit -Hn)", lim, idleH2Conns+1000)
	}
	const host = "idle-h2.rel.test"
	certPEM, keyPEM := keyPair(t, host)
	// All from 127.0.0.1: the per-address connection budget (512 by default) is lifted.
	p, _ := standalone(t, binarytest.TableJSON(t, 1, []routetable.Certificate{{ID: "c", CertificatePEM: certPEM, PrivateKeyPEM: keyPEM}},
		binarytest.Route(host, "c", false, echoBackend(t, "idle"))), "--max-conns-per-client", "0", "--idle-timeout", idleTestTimeout)
	open := func(n int) ([]*h2IdleClient, error) {
		clients := make([]*h2IdleClient, n)
		return clients, eachH2(n, func(i int) error {
			h, err := dialH2Idle(p.HTTPS, host)
			if err != nil {
				return fmt.Errorf("connection %d: %w", i, err)
			}
			clients[i] = h
			path := fmt.Sprintf("/idle/%d", i)
			if status, body, err := h.get(host, path); err != nil || status != "200" || body != "idle "+path {
				return fmt.Errorf("connection %d: %s %q %v", i, status, body, err)
			}
			return nil
		})
	}
	closeClients := func(clients []*h2IdleClient) {
		for _, h := range clients {
			if h != nil {
				h.c.Close()
			}
		}
	}
	warm, err := open(100) // the pools and the runtime warmed up
	closeClients(warm)
	if err != nil {
		t.Fatal(err)
	}
	testwait.UntilWhy(t, waitLimit, "warm-up connections closed", func() (bool, string) {
		n := scrape(t, p.Admin).sum("ingress_open_connections")
		return n == 0, fmt.Sprintf("%v open", n)
	})
	base := scrape(t, p.Admin)
	from := p.LineCount()
	start := time.Now()
	clients, err := open(idleH2Conns)
	defer closeClients(clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d HTTP/2-over-TLS connections opened, a request each, in %v", idleH2Conns, time.Since(start).Round(time.Millisecond))
	// Parked, the binary returns the wave's memory to the OS and says so (as in
	// TestIdleKeepAliveMemory): measured then, Go memory is what is alive.
	released := p.WaitLineFrom(from, 2*time.Minute, func(m map[string]any) bool {
		n, _ := m["parked"].(float64)
		return m["msg"] == "returned idle connections' memory to the OS" && n >= idleH2Conns*99/100
	})
	held := scrape(t, p.Admin)
	heap := held.get("go_memstats_heap_alloc_bytes") - base.get("go_memstats_heap_alloc_bytes")
	stacks := held.get("go_memstats_stack_inuse_bytes") - base.get("go_memstats_stack_inuse_bytes")
	rss := held.get("process_resident_memory_bytes") - base.get("process_resident_memory_bytes")
	var goroutines float64
	testwait.UntilWhy(t, waitLimit, "no goroutine per idle connection", func() (bool, string) {
		goroutines = scrape(t, p.Admin).get("go_goroutines") - base.get("go_goroutines")
		return goroutines <= 10, fmt.Sprintf("%+.0f goroutines", goroutines)
	})
	t.Logf("%d idle HTTP/2-over-TLS connections: heap+stacks +%.1f MiB (%.0f B each: heap %.0f B, stacks %.0f B), RSS +%.1f MiB (%.0f B each), goroutines %+.0f; the release took %v",
		idleH2Conns, (heap+stacks)/(1<<20), (heap+stacks)/idleH2Conns, heap/idleH2Conns, stacks/idleH2Conns,
		rss/(1<<20), rss/idleH2Conns, goroutines, released["took"])
	if heap+stacks >= idleH2Budget {
		t.Errorf("%d idle HTTP/2-over-TLS connections hold %.1f MiB of heap and stacks, want under %d MiB (16 KB each)",
			idleH2Conns, (heap+stacks)/(1<<20), idleH2Budget>>20)
	}
	// Every one still answers, with its own answer.
	start = time.Now()
	if err := eachH2(idleH2Conns, func(i int) error {
		path := fmt.Sprintf("/again/%d", i)
		if status, body, err := clients[i].get(host, path); err != nil || status != "200" || body != "idle "+path {
			return fmt.Errorf("parked connection %d: %s %q %v", i, status, body, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("a request on each parked connection: %v", time.Since(start).Round(time.Millisecond))
}

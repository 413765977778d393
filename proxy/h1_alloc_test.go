package proxy

import (
	"bufio"
	"crypto/tls"
	"net"
	"testing"

	"github.com/serve-zone/ingress/routetable"
)

// TestH1HotPathAllocs: a request forwarded on the fast path allocates nothing, measured
// through real loopback sockets for the whole process (a client and a target that
// allocate nothing themselves, the proxy between them), over plain TCP and over TLS (the
// idle wait's bookkeeping for parking included). Under the race detector sync.Pool drops
// a share of what is put back, so a few pooled buffers are made again.
func TestH1HotPathAllocs(t *testing.T) {
	for _, secure := range []bool{false, true} {
		name := "plain"
		if secure {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) { h1HotPathAllocs(t, secure) })
	}
}

func h1HotPathAllocs(t *testing.T, secure bool) {
	e := newEnv(t)
	target := rawTarget(t)
	e.apply([]routeSpec{{host: "app.example.test", tls: &routetable.RouteTLS{CertificateID: "c"}, backends: []string{target}}},
		certSpec{"c", []string{"app.example.test"}})
	var c net.Conn
	var err error
	if secure {
		c, err = tls.Dial("tcp", e.https, &tls.Config{ServerName: "app.example.test", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	} else {
		c, err = net.Dial("tcp", e.http)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReaderSize(c, 4096)
	req := []byte("GET /bench?q=1 HTTP/1.1\r\nHost: app.example.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	var failed error
	do := func() {
		if failed != nil {
			return
		}
		if _, err := c.Write(req); err != nil {
			failed = err
			return
		}
		failed = readRawResponse(br)
	}
	for range 200 { // warm: pools, buffers, goroutine stacks, the target connection
		do()
	}
	allocs := testing.AllocsPerRun(2000, do)
	if u := e.srv.clients.Usage(addrA); u.Conns != 1 {
		t.Fatalf("the client's address holds %d connections, want 1: the measured path must count budgets (budgets.go)", u.Conns)
	}
	if failed != nil {
		t.Fatal(failed)
	}
	t.Logf("%.3f allocations per request for client, proxy and target together", allocs)
	limit := 0.0
	switch {
	case raceEnabled && secure:
		limit = 3 // crypto/tls allocates 2 per request under the race detector, parking or not
	case raceEnabled:
		limit = 1
	}
	if allocs > limit {
		t.Errorf("%.3f allocations per request, want at most %.0f", allocs, limit)
	}
	if st := e.stat("app.example.test"); st.Requests < 2200 {
		t.Errorf("requests counted: %d, want at least 2200", st.Requests)
	}
}

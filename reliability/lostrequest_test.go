package reliability

// Issue 33, finding 1: a request that reached the target engine more than a second after
// it arrived (a slow connect, a failover from a dead target, a wait for a processor) was
// never sent, and answered 504 after --response-header-timeout.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/routetable"
)

// fullListener is a loopback listener whose accept queue is full: listen(2)'s backlog is
// 0 and one connection (fill) sits in the queue unaccepted, so the kernel drops the SYN
// of every new connection without an answer (no reset), as a host that drops packets
// does; the connecting side retransmits its SYN after 1 s, then 3 s, and so on.
type fullListener struct {
	ln   net.Listener
	fill net.Conn
}

func newFullListener(t *testing.T) *fullListener {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err == nil {
		err = syscall.Listen(fd, 0)
	}
	if err != nil {
		_ = syscall.Close(fd)
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "full-listener")
	ln, err := net.FileListener(f) // a duplicate: the backlog stays 0
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	fl := &fullListener{ln: ln}
	t.Cleanup(func() { ln.Close() })
	if fl.fill, err = net.DialTimeout("tcp", ln.Addr().String(), waitLimit); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fl.fill.Close() })
	// The queue is full: a connection attempt now gets no answer.
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), 300*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("a connection to a listener with a full accept queue was answered: this kernel does not drop such SYNs, so the test cannot make a target that drops one")
	}
	return fl
}

// serveAfter waits for d, then takes the filling connection out of the queue (so the next
// retransmitted SYN is answered) and serves every connection from then on with a 200 naming name, until the
// test ends (its cleanup closes the listener and the connections, then waits).
func (fl *fullListener) serveAfter(t *testing.T, d time.Duration, name string) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		fl.ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		time.Sleep(d)
		for {
			c, err := fl.ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					body := name + " " + req.URL.Path
					if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
						return
					}
				}
			})
		}
	})
}

func (fl *fullListener) target(t *testing.T, lease string) routetable.Target {
	return binarytest.TargetOf(t, fl.ln.Addr().String(), lease)
}

// TestDroppedSYNRequestSent: a target whose first SYN is dropped is connected to on the
// kernel's retransmission a second later, and the request is then sent and answered:
// over the HTTP/1.1 fast path, HTTP/1.0 (net/http's path) and h2c (the own HTTP/2
// engine), each in about a second (nginx: 200 in 1.04 s). Before the fix each waited for
// --response-header-timeout and got 504: the request was never written, its first read
// deadline (a second after it arrived) being past when the connection came.
func TestDroppedSYNRequestSent(t *testing.T) {
	t.Parallel()
	kinds := []string{"http1", "http10", "h2c"}
	var routes []routetable.Route
	lns := map[string]*fullListener{}
	for _, k := range kinds {
		fl := newFullListener(t)
		lns[k] = fl
		routes = append(routes, binarytest.Route(k+".syn.rel.test", "", false, fl.target(t, "lease-syn-"+k)))
	}
	const headerTimeout = 8 * time.Second
	p, _ := standalone(t, binarytest.TableJSON(t, 1, nil, routes...),
		"--response-header-timeout", headerTimeout.String())

	var wg sync.WaitGroup
	for _, k := range kinds {
		fl, host := lns[k], k+".syn.rel.test"
		// The ingress's SYN goes out and is dropped; 300 ms later room is made for its
		// retransmission.
		fl.serveAfter(t, 300*time.Millisecond, k)
		wg.Go(func() {
			start := time.Now()
			code, body, err := synRequest(k, p.HTTP, host)
			took := time.Since(start)
			if err != nil || code != http.StatusOK || body != k+" /syn" {
				t.Errorf("%s: %d %q, %v after %v; want 200 from the target once its SYN was retransmitted", k, code, body, err, took.Round(time.Millisecond))
				return
			}
			if took >= headerTimeout {
				t.Errorf("%s: answered after %v, at the header timeout", k, took)
			}
			t.Logf("%s: 200 after %v", k, took.Round(time.Millisecond))
		})
	}
	wg.Wait()
}

// synRequest sends GET /syn to the ingress at addr with Host host as kind says.
func synRequest(kind, addr, host string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch kind {
	case "http10":
		c, err := net.DialTimeout("tcp", addr, waitLimit)
		if err != nil {
			return 0, "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(c, "GET /syn HTTP/1.0\r\nHost: %s\r\n\r\n", host); err != nil {
			return 0, "", err
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, string(b), err
	case "h2c":
		var ps http.Protocols
		ps.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: &ps}
		defer tr.CloseIdleConnections()
		code, body, err := do(ctx, &http.Client{Transport: tr}, http.MethodGet, addr, host, "/syn")
		return code, body, err
	default:
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		return do(ctx, &http.Client{Transport: tr}, http.MethodGet, addr, host, "/syn")
	}
}

// TestFailoverFromDeadTargetSent: with one target that never answers a SYN and one that
// works, concurrent requests that try the dead one first fail over to the good one when
// their connect times out (--dial-timeout 2s) and are answered there, every one of them
// (before the fix 1-4 of 8 got 504 after the header timeout: their request was never
// written to the good target).
func TestFailoverFromDeadTargetSent(t *testing.T) {
	t.Parallel()
	dead := newFullListener(t)
	const host = "failover.syn.rel.test"
	const headerTimeout = 10 * time.Second
	p, _ := standalone(t, binarytest.TableJSON(t, 1, nil,
		binarytest.Route(host, "", false, dead.target(t, "lease-dead"), echoBackend(t, "good"))),
		"--dial-timeout", "2s", "--response-header-timeout", headerTimeout.String())
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			path := fmt.Sprintf("/fo/%d", i)
			code, body, err := do(ctx, &http.Client{Transport: tr}, http.MethodGet, p.HTTP, host, path)
			took := time.Since(start)
			if err != nil || code != http.StatusOK || body != "good "+path {
				t.Errorf("request %d: %d %q, %v after %v; want 200 from the good target", i, code, body, err, took.Round(time.Millisecond))
			} else if took >= headerTimeout {
				t.Errorf("request %d: answered after %v, at the header timeout", i, took)
			}
		})
	}
	wg.Wait()
}

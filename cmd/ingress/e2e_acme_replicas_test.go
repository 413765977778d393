package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/echotest"
	"github.com/serve-zone/ingress/internal/pebbletest"
	"github.com/serve-zone/ingress/internal/redistest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// replicaWait bounds the waits of the three-replica test for what crosses processes (an
// order, a lock's expiry: 10 s).
const replicaWait = 40 * time.Second

// replicas are ingress binaries sharing one --acme-storage, validated through a splitter
// that sends each validation to a replica that did not order.
type replicas struct {
	t      *testing.T
	procs  []*ingressProc
	redis  *redistest.Server
	peb    *pebbletest.Pebble
	front  *pebbletest.Front
	split  *pebbletest.Splitter
	file   string
	target routetable.Target
	rev    int64

	mu      sync.Mutex
	dead    map[int]bool
	blocked map[string]bool // names whose validations are dropped
}

// orderer returns the live replica that most recently started to solve a challenge for
// name, waiting up to limit for one to.
func (rs *replicas) orderer(name string, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for {
		best, bestAt := -1, time.Time{}
		rs.mu.Lock()
		procs, dead := rs.procs, rs.dead
		for i, p := range procs {
			if dead[i] {
				continue
			}
			m := p.FindLine(0, func(m map[string]any) bool {
				return m["msg"] == "trying to solve challenge" && m["identifier"] == name
			})
			if m == nil {
				continue
			}
			if at := lineTime(m); best < 0 || at.After(bestAt) {
				best, bestAt = i, at
			}
		}
		rs.mu.Unlock()
		if best >= 0 {
			return best, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no replica solves a challenge for %s", name)
		}
		time.Sleep(testwait.Poll)
	}
}

// route is the splitter's choice: the next live replica after the one that ordered.
func (rs *replicas) route(v pebbletest.Validation) (string, error) {
	rs.mu.Lock()
	blocked := rs.blocked[v.Name]
	rs.mu.Unlock()
	if blocked {
		return "", errors.New("blocked by the test")
	}
	o, err := rs.orderer(v.Name, 20*time.Second)
	if err != nil {
		return "", err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for k := 1; k < len(rs.procs); k++ {
		i := (o + k) % len(rs.procs)
		if rs.dead[i] {
			continue
		}
		if v.Kind == "http-01" {
			return rs.procs[i].HTTP, nil
		}
		return rs.procs[i].HTTPS, nil
	}
	return "", errors.New("no other live replica")
}

// lineTime is a JSON log line's time.
func lineTime(m map[string]any) time.Time {
	s, _ := m["ts"].(string)
	at, _ := time.Parse(time.RFC3339Nano, s)
	return at
}

// serve writes the routes file: an ACME route for each name.
func (rs *replicas) serve(names ...string) {
	rs.t.Helper()
	rs.rev++
	var routes []routetable.Route
	for _, n := range names {
		routes = append(routes, acmeRoute(n, false, rs.target))
	}
	binarytest.WriteFileAtomic(rs.t, rs.file, binarytest.TableJSON(rs.t, rs.rev, nil, routes...))
}

func (rs *replicas) alive() []int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var out []int
	for i := range rs.procs {
		if !rs.dead[i] {
			out = append(out, i)
		}
	}
	return out
}

// loadedAt waits for replica i's line saying it loaded name's certificate and returns
// its time and the serial.
func (rs *replicas) loadedAt(i int, name string) (time.Time, string) {
	rs.t.Helper()
	m := rs.procs[i].WaitLine(replicaWait, func(m map[string]any) bool {
		return m["msg"] == "acme: certificate loaded from the store" && m["hostname"] == name
	})
	return lineTime(m), fmt.Sprint(m["serial"])
}

// servedSerial completes a TLS handshake with replica i for name, verified against
// roots, and returns the leaf's serial (hexadecimal, as the log lines write it).
func (rs *replicas) servedSerial(i int, name string, roots *x509.CertPool) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: e2eWait}, "tcp", rs.procs[i].HTTPS,
		&tls.Config{ServerName: name, RootCAs: roots, NextProtos: []string{"http/1.1"}})
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

// converge waits until every live replica loaded name and serves the same certificate,
// checks it was ordered once, by one replica, and validated through another, and returns
// the time from the order's certificate to the last replica's load.
func (rs *replicas) converge(name string, roots *x509.CertPool, orders int) time.Duration {
	rs.t.Helper()
	t := rs.t
	var obtained time.Time
	var orderer = -1
	for _, i := range rs.alive() {
		if m := rs.procs[i].FindLine(0, func(m map[string]any) bool {
			return m["msg"] == "acme: certificate obtained" && m["hostname"] == name
		}); m != nil {
			orderer, obtained = i, lineTime(m)
		}
	}
	var last time.Time
	serials := map[string]bool{}
	for _, i := range rs.alive() {
		at, serial := rs.loadedAt(i, name)
		serials[serial] = true
		if at.After(last) {
			last = at
		}
		if orderer < 0 {
			if m := rs.procs[i].FindLine(0, func(m map[string]any) bool {
				return m["msg"] == "acme: certificate obtained" && m["hostname"] == name
			}); m != nil {
				orderer, obtained = i, lineTime(m)
			}
		}
	}
	if orderer < 0 {
		t.Fatalf("%s: no live replica obtained the certificate", name)
	}
	if len(serials) != 1 {
		t.Errorf("%s: the replicas loaded different certificates: %v", name, serials)
	}
	for _, i := range rs.alive() {
		for serial := range serials {
			testwait.UntilWhy(t, replicaWait, fmt.Sprintf("replica %d serving %s's certificate %s", i, name, serial), func() (bool, string) {
				got, err := rs.servedSerial(i, name, roots)
				if err != nil {
					return false, err.Error()
				}
				return got == serial, "serves " + got
			})
		}
	}
	if n := rs.front.Orders(name); n != orders {
		t.Errorf("%s: %d orders at the CA, want %d (%v)", name, n, orders, rs.front.AllOrders())
	}
	var validated int
	for _, v := range rs.split.Validations() {
		if v.Name != name || v.To == "" {
			continue
		}
		validated++
		if v.To == rs.procs[orderer].HTTP || v.To == rs.procs[orderer].HTTPS {
			t.Errorf("%s: a validation went to the replica that ordered: %+v", name, v)
		}
	}
	if validated == 0 {
		t.Errorf("%s: no validation reached a replica through the splitter", name)
	}
	return last.Sub(obtained)
}

// TestE2EACMEReplicasShareRedis runs three ingress binaries with one --acme-storage (a
// Debian redis-server with a password), Pebble behind an order-counting front, and a
// splitter that sends each validation to another replica than the one that ordered:
//
//   - each name is ordered exactly once and all three serve the same certificate (the
//     time from the order's certificate to the third replica's load is logged);
//   - a replica killed while it holds a name's lock (its order failed and waits to be
//     retried) does not keep the others from obtaining that name once the lock expires;
//   - Redis stopped and started again while the replicas serve: no request fails, the
//     outage is reported (/readyz, metrics), and a name added meanwhile is obtained, once,
//     when Redis is back.
func TestE2EACMEReplicasShareRedis(t *testing.T) {
	buildBinary(t)
	pebbletest.Binary(t)
	t.Parallel()
	began := time.Now()
	phase := func(what string) { t.Logf("%s: %s after the start", what, time.Since(began).Round(time.Millisecond)) }
	_, target := echoBackend(t, "backend", 0)
	dir := t.TempDir()
	rs := &replicas{t: t, target: target, file: filepath.Join(dir, "routes.json"), dead: map[int]bool{}, blocked: map[string]bool{}}
	rs.redis = redistest.Start(t, redistest.Options{Password: storagePassword})
	rs.split = pebbletest.NewSplitter(t, rs.route)
	rs.peb = pebbletest.Start(t, pebbletest.Options{HTTPPort: rs.split.HTTPPort, TLSPort: rs.split.TLSPort})
	rs.front = rs.peb.Front(t)
	pwFile := writeSecret(t, storagePassword)

	const a, b, c = "a.replicas.test", "b.replicas.test", "c.replicas.test"
	rs.serve(a, b, c)
	var procs []*ingressProc
	for i := range 3 {
		p := startIngress(t, nil, binarytest.BaseArgs("--routes", rs.file, "--state-dir", filepath.Join(dir, fmt.Sprint("node-", i)),
			"--acme-ca", rs.front.Directory, "--acme-ca-root", rs.front.RootsFile, "--acme-agree", "--acme-email", "ops@example.test",
			"--acme-storage", rs.redis.URL(), "--acme-storage-password-file", pwFile, "--acme-storage-prefix", "e2e-cluster")...)
		p.TailLines = 60
		procs = append(procs, p)
	}
	rs.mu.Lock()
	rs.procs = procs
	rs.mu.Unlock()
	roots := rs.peb.IssuingRoots(t)
	phase("three replicas started")

	// One order per name; every replica serves its certificate.
	for _, name := range []string{a, b, c} {
		took := rs.converge(name, roots, 1)
		t.Logf("%s: from the certificate obtained by one replica to the third replica serving it: %s", name, took)
		if took > 10*time.Second {
			t.Errorf("%s: the replicas took %s to serve one replica's certificate", name, took)
		}
	}

	phase("three names served by the three")

	// A replica dies holding a lock: its order for d fails (the splitter drops d's
	// validations) and certmagic keeps the lock while it waits to retry; it is killed;
	// the lock expires (10 s) and another replica obtains d.
	const d = "d.replicas.test"
	rs.mu.Lock()
	rs.blocked[d] = true
	rs.mu.Unlock()
	marks := make([]int, len(procs))
	for i, p := range procs {
		marks[i] = p.LineCount()
	}
	rs.serve(a, b, c, d)
	holder := -1
	testwait.Until(t, replicaWait, "a replica's order for "+d+" to fail", func() bool {
		for i, p := range procs {
			if p.FindLine(marks[i], func(m map[string]any) bool {
				return m["msg"] == "acme: certificate not obtained; certmagic retries with backoff" && m["hostname"] == d
			}) != nil {
				holder = i
				return true
			}
		}
		return false
	})
	failedOrders := rs.front.Orders(d) // one per challenge type tried
	procs[holder].Signal(syscall.SIGKILL)
	procs[holder].Wait(e2eWait)
	killed := time.Now()
	rs.mu.Lock()
	rs.dead[holder] = true
	rs.blocked[d] = false
	rs.mu.Unlock()
	took := rs.converge(d, roots, failedOrders+1) // the killed replica's failed orders, then one
	t.Logf("replica %d killed holding the lock of %s: the others served a new certificate %s after the kill (%s after it was obtained)",
		holder, d, time.Since(killed).Round(time.Millisecond), took)

	phase("the killed holder's name served by the others")

	// Redis stops and starts again while the two left serve; requests keep going.
	live := rs.alive()
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	ctx, stop := context.WithCancel(context.Background())
	var load sync.WaitGroup
	for _, i := range live {
		load.Go(func() {
			tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: a, RootCAs: roots}, DisableKeepAlives: true}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: e2eWait}
			for n := 0; n < 5000 && ctx.Err() == nil; n++ { // new TLS connections: each asks for the certificate
				sent.Add(1)
				req, err := http.NewRequest(http.MethodGet, "https://"+procs[i].HTTPS+"/during-outage", nil)
				if err != nil {
					panic(err)
				}
				req.Host = a
				res, err := cl.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != 200 {
						err = fmt.Errorf("status %d", res.StatusCode)
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				time.Sleep(5 * time.Millisecond) // a steady trickle, not a load test
			}
		})
	}
	rs.redis.Stop()
	const e = "e.replicas.test"
	rs.serve(a, b, c, d, e)
	for _, i := range live {
		testwait.UntilWhy(t, replicaWait, fmt.Sprintf("replica %d's /readyz to report the store down", i), func() (bool, string) {
			code, body := readyz(t, procs[i].Admin)
			return code == 200 && strings.Contains(body, "acme: degraded: the certificate store redis://:xxxxx@"+rs.redis.Addr+"/0 does not answer"), body
		})
		if m := mustGet(t, httpClient(t), procs[i].Admin, "", "/metrics", 200).body; !strings.Contains(m, "ingress_acme_storage_up 0") {
			t.Errorf("replica %d: /metrics lacks ingress_acme_storage_up 0", i)
		}
	}
	phase("the outage reported")
	rs.redis.Restart(t)
	took = rs.converge(e, roots, 1)
	phase("the name added during the outage served")
	stop()
	load.Wait()
	t.Logf("Redis stopped and started: %d requests, %d failed; %s was obtained when it came back and served everywhere %s after",
		sent.Load(), failed.Load(), e, took)
	if failed.Load() > 0 {
		t.Errorf("%d of %d requests failed while Redis was down; the first: %v", failed.Load(), sent.Load(), firstErr.Load())
	}
	for _, i := range live {
		_, body := readyz(t, procs[i].Admin)
		if strings.Contains(body, "degraded") {
			t.Errorf("replica %d still reports the store down:\n%s", i, body)
		}
		if n := strings.Count(procs[i].Stderr(), "acme: the certificate store does not answer;"); n != 1 {
			t.Errorf("replica %d said %d times that the store does not answer, want once", i, n)
		}
	}
	for _, i := range live {
		procs[i].Stop(e2eWait)
	}
	phase("stopped")
	for i, p := range procs {
		p.AssertNoSecret(storagePassword)
		if w, ok := echotest.SharesWindow(p.Output(), storagePassword, 8); ok {
			t.Errorf("replica %d's output holds %q of the password", i, w)
		}
		if entries, _ := os.ReadDir(filepath.Join(dir, fmt.Sprint("node-", i), acmeStorageDir)); len(entries) > 0 {
			t.Errorf("replica %d kept ACME files under --state-dir: %v", i, entries)
		}
	}
}

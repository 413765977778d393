package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/redistest"
	"github.com/serve-zone/ingress/internal/testcert"
	"github.com/serve-zone/ingress/internal/testwait"
)

// The tests run against Debian's redis-server (internal/redistest), started by each test
// on a loopback port of its own.

const testPassword = "s3cret-redis-password-for-tests"

func newStore(t *testing.T, srv *redistest.Server, o Options) *Store {
	t.Helper()
	if o.URL == "" {
		o.URL = srv.URL()
	}
	if o.Password == "" {
		o.Password = srv.Password
	}
	if o.Prefix == "" {
		o.Prefix = "test"
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestStorageContract: Store, Load, Exists, Stat, List and Delete with certmagic's file
// and directory semantics, and two prefixes on one server that never see each other.
func TestStorageContract(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: testPassword})
	a := newStore(t, srv, Options{Prefix: "cluster-a"})
	b := newStore(t, srv, Options{Prefix: "cluster-b"})
	ctx := context.Background()
	if err := a.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"acme/ca/users/ops/registration.json": "reg",
		"acme/ca/users/ops/private.key":       "key",
		"ocsp/x-1":                            "staple",
		"top":                                 "1",
	} {
		if err := a.Store(ctx, k, []byte(v)); err != nil {
			t.Fatalf("Store %s: %v", k, err)
		}
	}
	if v, err := a.Load(ctx, "acme/ca/users/ops/private.key"); err != nil || string(v) != "key" {
		t.Fatalf("Load = %q, %v", v, err)
	}
	if _, err := a.Load(ctx, "acme/ca/users/ops/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing key: %v, want fs.ErrNotExist", err)
	}
	if _, err := b.Load(ctx, "top"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("another prefix sees the key: %v", err)
	}
	for key, want := range map[string]bool{"top": true, "acme": true, "acme/ca/users": true, "acme/c": false, "nothing": false} {
		if got := a.Exists(ctx, key); got != want {
			t.Errorf("Exists(%q) = %v, want %v", key, got, want)
		}
	}
	if b.Exists(ctx, "acme") {
		t.Error("another prefix sees the directory")
	}
	ki, err := a.Stat(ctx, "top")
	if err != nil || !ki.IsTerminal || ki.Size != 1 || time.Since(ki.Modified) > time.Minute || ki.Key != "top" {
		t.Errorf("Stat(top) = %+v, %v", ki, err)
	}
	if ki, err := a.Stat(ctx, "acme/ca"); err != nil || ki.IsTerminal {
		t.Errorf("Stat(dir) = %+v, %v", ki, err)
	}
	if _, err := a.Stat(ctx, "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(missing) = %v", err)
	}
	if got, err := a.List(ctx, "acme/ca/users", false); err != nil || !slices.Equal(got, []string{"acme/ca/users/ops"}) {
		t.Errorf("List(users) = %v, %v", got, err)
	}
	got, err := a.List(ctx, "acme", true)
	want := []string{"acme/ca", "acme/ca/users", "acme/ca/users/ops", "acme/ca/users/ops/private.key", "acme/ca/users/ops/registration.json"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("List(acme, recursive) = %v, %v; want %v", got, err, want)
	}
	if got, err := a.List(ctx, "", false); err != nil || !slices.Equal(got, []string{"acme", "ocsp", "top"}) {
		t.Errorf("List(root) = %v, %v", got, err)
	}
	if _, err := a.List(ctx, "none", false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("List(missing) = %v", err)
	}
	if err := a.Delete(ctx, "acme/ca"); err != nil {
		t.Fatal(err)
	}
	if a.Exists(ctx, "acme/ca/users/ops/private.key") || a.Exists(ctx, "acme") {
		t.Error("Delete of a directory left keys under it")
	}
	if err := a.Delete(ctx, "acme/ca"); err != nil {
		t.Errorf("Delete of a missing key: %v", err)
	}
	if !a.Exists(ctx, "top") {
		t.Error("Delete removed a key outside the directory")
	}
}

// TestLockExclusiveAndHandedOn: one holder at a time across stores (replicas); TryLock
// says no while it is held; a waiting Lock gets it within a poll of the release.
func TestLockExclusiveAndHandedOn(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: testPassword})
	a := newStore(t, srv, Options{})
	var tries atomic.Int32
	b := newStore(t, srv, Options{LockPoll: 50 * time.Millisecond, Observe: func(error) { tries.Add(1) }})
	ctx := context.Background()
	if err := a.Lock(ctx, "issue_cert_x"); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TryLock(ctx, "issue_cert_x"); ok || err != nil {
		t.Fatalf("TryLock while held = %v, %v", ok, err)
	}
	if ok, err := b.TryLock(ctx, "issue_cert_y"); !ok || err != nil {
		t.Fatalf("TryLock of another name = %v, %v", ok, err)
	}
	got := make(chan time.Time, 1)
	before := tries.Load()
	go func() {
		if err := b.Lock(ctx, "issue_cert_x"); err != nil {
			t.Errorf("Lock: %v", err)
		}
		got <- time.Now()
	}()
	testwait.Until(t, 10*time.Second, "three tries of the waiting Lock", func() bool { return tries.Load()-before >= 3 })
	select {
	case <-got:
		t.Fatal("Lock succeeded while another held the lock")
	default:
	}
	released := time.Now()
	if err := a.Unlock(ctx, "issue_cert_x"); err != nil {
		t.Fatal(err)
	}
	at := <-got
	t.Logf("lock handed on %s after its release (poll 50ms)", at.Sub(released))
	if err := a.Unlock(ctx, "issue_cert_x"); err == nil {
		t.Error("Unlock of a lock this store does not hold succeeded")
	}
	if ok, _ := a.TryLock(ctx, "issue_cert_x"); ok {
		t.Error("the lock was taken twice")
	}
	if err := b.Unlock(ctx, "issue_cert_x"); err != nil {
		t.Fatal(err)
	}
	// A waiting Lock honours its context, and a context that ends is no failure of the
	// server's (whether it ends between tries or during one).
	var failures atomic.Int32
	c := newStore(t, srv, Options{LockPoll: time.Millisecond, Observe: func(err error) {
		if err != nil {
			failures.Add(1)
		}
	}})
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := c.Lock(short, "issue_cert_y"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock of a held name until the context ends: %v", err)
	}
	if n := failures.Load(); n > 0 {
		t.Errorf("a Lock whose context ended counted %d failures of the server", n)
	}
}

// TestLockExpiresWhenHolderDies: a holder that stops renewing (it died) loses its lock
// within the TTL, another takes it, and the dead holder's late Unlock does not release
// the new holder's lock: only the owner releases.
func TestLockExpiresWhenHolderDies(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: testPassword})
	const ttl = 600 * time.Millisecond
	var lost atomic.Int32
	a := newStore(t, srv, Options{LockTTL: ttl, LockLost: func(string) { lost.Add(1) }})
	b := newStore(t, srv, Options{LockTTL: ttl, LockPoll: 20 * time.Millisecond})
	ctx := context.Background()
	if err := a.Lock(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	// a dies: its renewal stops, nothing is released.
	a.mu.Lock()
	h := a.held["job"]
	a.mu.Unlock()
	h.cancel()
	<-h.done
	died := time.Now()
	lctx, cancel := context.WithTimeout(ctx, 10*ttl)
	defer cancel()
	if err := b.Lock(lctx, "job"); err != nil {
		t.Fatalf("the lock of a dead holder was not taken within %s: %v", 10*ttl, err)
	}
	waited := time.Since(died)
	t.Logf("the dead holder's lock was taken %s after its last renewal (TTL %s)", waited, ttl)
	if waited < ttl/2 {
		t.Errorf("the lock was taken after %s, before its TTL (%s) could have passed", waited, ttl)
	}
	if err := a.Unlock(ctx, "job"); !errors.Is(err, ErrLockLost) {
		t.Errorf("the dead holder's Unlock: %v, want ErrLockLost", err)
	}
	if ok, _ := a.TryLock(ctx, "job"); ok {
		t.Fatal("the dead holder's Unlock released the new holder's lock")
	}
	if err := b.Unlock(ctx, "job"); err != nil {
		t.Fatal(err)
	}
}

// TestLockRenewedWhileHeld: a lock held for many TTLs stays held (renewed), and Close
// releases it so that no one waits for it to expire.
func TestLockRenewedWhileHeld(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: testPassword})
	const ttl = 300 * time.Millisecond
	var renewals atomic.Int32
	a := newStore(t, srv, Options{LockTTL: ttl, Observe: func(err error) {
		if err == nil {
			renewals.Add(1)
		}
	}})
	b := newStore(t, srv, Options{LockTTL: ttl})
	ctx := context.Background()
	if err := a.Lock(ctx, "long"); err != nil {
		t.Fatal(err)
	}
	start := renewals.Load()
	// Ten renewals (every TTL/3) is more than three TTLs: the lock would have expired.
	testwait.Until(t, 30*time.Second, "ten renewals", func() bool { return renewals.Load()-start >= 10 })
	if ok, err := b.TryLock(ctx, "long"); ok || err != nil {
		t.Fatalf("after three TTLs, another took the lock: %v, %v", ok, err)
	}
	if pttl := srv.Do(t, "PTTL", "test:lock:long"); pttl == ":-2" || pttl == ":-1" {
		t.Fatalf("PTTL of the held lock = %s", pttl)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TryLock(ctx, "long"); !ok || err != nil {
		t.Fatalf("after Close the lock is still held: %v, %v", ok, err)
	}
	if err := a.Store(ctx, "x", []byte("1")); !errors.Is(err, ErrClosed) {
		t.Errorf("Store after Close: %v", err)
	}
}

// pair is a certificate and its key as certmagic stores them, with metadata naming the
// certificate's serial.
type pair struct{ crt, key, meta []byte }

func newPair(t *testing.T, host string) pair {
	t.Helper()
	c, k, err := testcert.Generate(host)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode([]byte(c))
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := json.Marshal(map[string]string{"serial": leaf.SerialNumber.String()})
	return pair{crt: []byte(c), key: []byte(k), meta: meta}
}

const res = "certificates/acme-ca/app.example.test/app.example.test"

// storeTx writes p as certmagic's storeTx does: .key, .crt, .json, and on a failure
// deletes what it wrote before.
func storeTx(ctx context.Context, s *Store, p pair) error {
	kvs := []struct {
		k string
		v []byte
	}{{res + ".key", p.key}, {res + ".crt", p.crt}, {res + ".json", p.meta}}
	for i, kv := range kvs {
		if err := s.Store(ctx, kv.k, kv.v); err != nil {
			for j := i - 1; j >= 0; j-- {
				_ = s.Delete(ctx, kvs[j].k)
			}
			return err
		}
	}
	return nil
}

// loadResource reads as certmagic's loadCertResource does: .key, .crt, .json, and checks
// that they belong together.
func loadResource(ctx context.Context, s *Store) error {
	key, err := s.Load(ctx, res+".key")
	if err != nil {
		return err
	}
	crt, err := s.Load(ctx, res+".crt")
	if err != nil {
		return err
	}
	meta, err := s.Load(ctx, res+".json")
	if err != nil {
		return err
	}
	kp, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return fmt.Errorf("mismatched pair: %w", err)
	}
	leaf, _ := x509.ParseCertificate(kp.Certificate[0])
	var m map[string]string
	if err := json.Unmarshal(meta, &m); err != nil || m["serial"] != leaf.SerialNumber.String() {
		return fmt.Errorf("metadata %s does not describe the certificate %s", meta, leaf.SerialNumber)
	}
	return nil
}

// TestResourceWrittenAsOne: a certificate resource's .key and .crt are not visible before
// its .json; a writer that dies between the calls, or whose .json write fails (the server
// stopped), leaves the previous resource whole, and storeTx's rollback deletes nothing
// of it.
func TestResourceWrittenAsOne(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: testPassword})
	w := newStore(t, srv, Options{})
	r := newStore(t, srv, Options{})
	ctx := context.Background()
	old, renewed := newPair(t, "app.example.test"), newPair(t, "app.example.test")
	if err := storeTx(ctx, w, old); err != nil {
		t.Fatal(err)
	}
	if err := loadResource(ctx, r); err != nil {
		t.Fatal(err)
	}
	// A writer dies after the .key and .crt.
	dead := newStore(t, srv, Options{})
	if err := dead.Store(ctx, res+".key", renewed.key); err != nil {
		t.Fatal(err)
	}
	if err := dead.Store(ctx, res+".crt", renewed.crt); err != nil {
		t.Fatal(err)
	}
	_ = dead.Close()
	forgetSnapshots(r) // as if snapshotFresh passed: r reads the server again
	if got, _ := r.Load(ctx, res+".key"); string(got) != string(old.key) {
		t.Fatal("a writer that died before the .json changed the stored key")
	}
	if err := loadResource(ctx, r); err != nil {
		t.Fatalf("after a writer died mid-write: %v", err)
	}
	// The .json write fails: the server is down. storeTx's rollback deletes the .key and
	// .crt it wrote; then the server comes back.
	if err := w.Store(ctx, res+".key", renewed.key); err != nil {
		t.Fatal(err)
	}
	if err := w.Store(ctx, res+".crt", renewed.crt); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := w.Store(ctx, res+".json", renewed.meta); err == nil {
		t.Fatal("a write to a stopped server succeeded")
	}
	if err := w.Delete(ctx, res+".crt"); err != nil {
		t.Errorf("the rollback's Delete of a waiting .crt: %v", err)
	}
	if err := w.Delete(ctx, res+".key"); err != nil {
		t.Errorf("the rollback's Delete of a waiting .key: %v", err)
	}
	srv.Restart(t)
	forgetSnapshots(r)
	if err := loadResource(ctx, r); err != nil {
		t.Fatalf("after a failed write and its rollback: %v", err)
	}
	if got, _ := r.Load(ctx, res+".crt"); string(got) != string(old.crt) {
		t.Fatal("the stored certificate is not the previous one")
	}
	// A whole write replaces the three.
	if err := storeTx(ctx, w, renewed); err != nil {
		t.Fatal(err)
	}
	if got, _ := w.Load(ctx, res+".crt"); string(got) != string(renewed.crt) {
		t.Fatal("the writer does not read what it wrote")
	}
	// A real Delete (nothing waits) removes the file.
	if err := w.Delete(ctx, res+".json"); err != nil || w.Exists(ctx, res+".json") {
		t.Fatalf("Delete of a stored .json: %v", err)
	}
}

// TestReaderRacingRenewal: replicas read a certificate resource the way certmagic does
// while another replica renews it again and again: every read gets a certificate, its
// key and its metadata that belong together.
func TestReaderRacingRenewal(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: testPassword})
	w := newStore(t, srv, Options{})
	ctx := context.Background()
	pairs := []pair{newPair(t, "app.example.test"), newPair(t, "app.example.test"), newPair(t, "app.example.test")}
	if err := storeTx(ctx, w, pairs[0]); err != nil {
		t.Fatal(err)
	}
	const writes, readers, reads = 400, 3, 400
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var written atomic.Int32
	wg.Go(func() {
		for i := 0; i < writes; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := storeTx(ctx, w, pairs[i%len(pairs)]); err != nil {
				t.Errorf("write %d: %v", i, err)
				return
			}
			written.Add(1)
		}
	})
	var bad atomic.Int32
	for range readers {
		r := newStore(t, srv, Options{})
		wg.Go(func() {
			for i := 0; i < reads && written.Load() < writes; i++ {
				forgetSnapshots(r) // each read goes to the server, as reads further apart than snapshotFresh do
				if err := loadResource(ctx, r); err != nil {
					if bad.Add(1) == 1 {
						t.Errorf("read %d: %v", i, err)
					}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	t.Logf("%d writes, %d mismatched reads", written.Load(), bad.Load())
}

// forgetSnapshots drops s's resources read as one, as snapshotFresh passing would.
func forgetSnapshots(s *Store) {
	s.mu.Lock()
	clear(s.snaps)
	s.mu.Unlock()
}

// TestURLs: the URL forms accepted, and refusals that never quote the URL (it may hold
// the password).
func TestURLs(t *testing.T) {
	for _, c := range []struct {
		in       string
		redacted string
	}{
		{"redis://127.0.0.1:6390/2", "redis://127.0.0.1:6390/2"},
		{"redis://localhost", "redis://localhost:6379/0"},
		{"rediss://ingress:" + testPassword + "@redis.example:6380/", "rediss://ingress:xxxxx@redis.example:6380/0"},
		{"redis://:" + testPassword + "@[::1]:6379", "redis://:xxxxx@[::1]:6379/0"},
	} {
		e, err := ParseURL(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got := e.Redacted(); got != c.redacted {
			t.Errorf("Redacted(%s) = %s, want %s", c.in, got, c.redacted)
		}
	}
	for _, in := range []string{
		"http://" + testPassword + "@host:1/0", testPassword + "://x", "redis://u:" + testPassword + "@host:99999/0",
		"redis://u:" + testPassword + "@host:1/0?db=1", "redis://u:" + testPassword + "@host:1/a/b", "redis://u:" + testPassword + "@:1/0",
		"redis://u:" + testPassword + "@host:1/x", "redis:" + testPassword, "redis://u:" + testPassword + "@host:1/0#f",
		"redis://u:" + testPassword + "@h%zz:1/0", "redis://u:" + testPassword + "@host:/0",
	} {
		_, err := ParseURL(in)
		if err == nil {
			t.Errorf("%s accepted", in)
			continue
		}
		if strings.Contains(err.Error(), testPassword) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the refusal of %q quotes the password: %v", in, err)
		}
	}
	if _, err := New(Options{URL: "redis://:a@h:1/0", Password: "b", Prefix: "p"}); err == nil {
		t.Error("a password in the URL and another given were accepted")
	}
	for _, p := range []string{"", "a b", "a*", strings.Repeat("x", 129), "a?b"} {
		if CheckPrefix(p) == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
	if err := CheckPrefix("cluster-a:ingress/v1"); err != nil {
		t.Error(err)
	}
}

// TestResourceOf: which keys make one certificate resource.
func TestResourceOf(t *testing.T) {
	for key, want := range map[string]string{
		"certificates/ca/a.example/a.example.key":   "certificates/ca/a.example/a.example",
		"certificates/ca/a.example/a.example.crt":   "certificates/ca/a.example/a.example",
		"certificates/ca/a.example/a.example.json":  "certificates/ca/a.example/a.example",
		"certificates/ca/a.example/b.example.key":   "",
		"certificates/ca/a.example.key":             "",
		"acme/ca/users/x/private.key":               "",
		"certificates/ca/a.example/a.example.pem":   "",
		"x/certificates/ca/a.example/a.example.crt": "",
	} {
		got, _, ok := resourceOf(key)
		if got != want || ok != (want != "") {
			t.Errorf("resourceOf(%s) = %q %v, want %q", key, got, ok, want)
		}
	}
}

// tlsFront serves TLS for "localhost" with a fresh certificate at a loopback port and
// forwards each connection to addr; it returns its port and the certificate's pool.
func tlsFront(t *testing.T, addr string) (string, *x509.CertPool) {
	t.Helper()
	c, k, err := testcert.Generate("localhost")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.X509KeyPair([]byte(c), []byte(k))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{kp}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer in.Close()
				out, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{})
				go func() { _, _ = io.Copy(out, in); out.Close(); close(done) }()
				_, _ = io.Copy(in, out)
				in.Close()
				<-done
			})
		}
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(c))
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port, pool
}

// TestTLS: rediss:// verifies the server's certificate against RootCAs (the system's
// roots when nil), and says why it refused one without the names the server chose.
func TestTLS(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: testPassword})
	port, roots := tlsFront(t, srv.Addr)
	ctx := context.Background()
	good := newStore(t, srv, Options{URL: "rediss://localhost:" + port + "/0", RootCAs: roots})
	if err := good.Ping(ctx); err != nil {
		t.Fatalf("Ping over TLS: %v", err)
	}
	if err := good.Store(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	untrusted := newStore(t, srv, Options{URL: "rediss://localhost:" + port + "/0"})
	err := untrusted.Ping(ctx)
	var e *Error
	if !errors.As(err, &e) || !e.Unreachable || !strings.Contains(err.Error(), "TLS: the server's certificate is signed by an authority not trusted") {
		t.Errorf("Ping to an untrusted server: %v", err)
	}
	plain := newStore(t, srv, Options{URL: "rediss://" + srv.Addr + "/0", RootCAs: roots})
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := plain.Ping(short); err == nil || strings.Contains(err.Error(), testPassword) {
		t.Errorf("TLS to a plain server: %v", err)
	}
}

// TestUnansweredExistsSaysYes: certmagic decides whether to order by asking Exists; a
// server that does not answer must not make it order.
func TestUnansweredExistsSaysYes(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: testPassword})
	var failures atomic.Int32
	s := newStore(t, srv, Options{Observe: func(err error) {
		if err != nil {
			failures.Add(1)
		}
	}})
	ctx := context.Background()
	if s.Exists(ctx, res+".crt") {
		t.Fatal("Exists of a missing key")
	}
	srv.Stop()
	if !s.Exists(ctx, res+".crt") {
		t.Error("Exists with the server down said no")
	}
	if _, err := s.Load(ctx, res+".key"); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load with the server down: %v, want a failure that is not fs.ErrNotExist", err)
	}
	if failures.Load() == 0 {
		t.Error("no failure observed")
	}
}

// FuzzParseURL: whatever the URL, a refusal never quotes its password, and the redacted
// form never holds it.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"redis://127.0.0.1:6379/0", "rediss://user:pa55word-x@redis.example:6380/3", "redis://:secretsecret@[::1]/",
		"redis://u:p%40ss%3Aword@h:1/0", "redis://h", "http://u:pw@h:1", "redis://u:pw@h:99999/0?x=1#f",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			return
		}
		pw, ok := u.User.Password()
		if !ok || len(pw) < 6 {
			return
		}
		ep, err := ParseURL(raw)
		if err != nil {
			if strings.Contains(err.Error(), pw) {
				t.Fatalf("the refusal of %q quotes the password: %v", raw, err)
			}
			return
		}
		if strings.Contains(ep.Redacted(), pw) && !strings.Contains(ep.Host, pw) && !strings.Contains(ep.Username, pw) {
			t.Fatalf("Redacted(%q) = %q holds the password", raw, ep.Redacted())
		}
		if ep.Password != pw {
			t.Fatalf("ParseURL(%q) password %q, want %q", raw, ep.Password, pw)
		}
	})
}

// TestLockVoidsSnapshots: what a replica reads after it took a lock is what the lock's
// previous holder left, even when it read the resource a moment before (certmagic decides
// under the lock whether a renewal is still needed: a stale read orders twice).
func TestLockVoidsSnapshots(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: testPassword})
	w := newStore(t, srv, Options{})
	r := newStore(t, srv, Options{})
	ctx := context.Background()
	old, renewed := newPair(t, "app.example.test"), newPair(t, "app.example.test")
	if err := storeTx(ctx, w, old); err != nil {
		t.Fatal(err)
	}
	if err := w.Lock(ctx, "issue_cert_app"); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Load(ctx, res+".key"); string(got) != string(old.key) { // r's snapshot: the old three
		t.Fatal("first read")
	}
	if err := storeTx(ctx, w, renewed); err != nil {
		t.Fatal(err)
	}
	if err := w.Unlock(ctx, "issue_cert_app"); err != nil {
		t.Fatal(err)
	}
	if err := r.Lock(ctx, "issue_cert_app"); err != nil {
		t.Fatal(err)
	}
	defer r.Unlock(ctx, "issue_cert_app")
	if got, _ := r.Load(ctx, res+".key"); string(got) != string(renewed.key) {
		t.Fatal("under the lock, a read answered from a snapshot taken before it")
	}
	if err := loadResource(ctx, r); err != nil {
		t.Fatal(err)
	}
}

package acme

import (
	"crypto/x509"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/serve-zone/ingress/internal/pebbletest"
	"github.com/serve-zone/ingress/internal/redistest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// Tests of replicas sharing a certificate store in Redis: Debian's redis-server
// (internal/redistest), Pebble behind an order-counting front, and a splitter that sends
// each validation to the replica that did not order.

const redisPassword = "shared-store-password-4b1f"

// has reports whether an event matching match was recorded.
func (r *recorder) has(match func(event) bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.events, match)
}

// nilTables is a table source with no table.
type nilTables struct{}

func (nilTables) Load() *routetable.Compiled { return nil }

// sharedRigs are replicas sharing one Redis.
type sharedRigs struct {
	rigs  []*rig
	redis *redistest.Server
	peb   *pebbletest.Pebble
	front *pebbletest.Front
	split *pebbletest.Splitter
}

// startShared runs n rigs sharing one Redis store, their CA Pebble behind a Front, its
// validations through a Splitter that sends each to a rig that did not order the name.
func startShared(t *testing.T, n int, validity time.Duration, opts Options) *sharedRigs {
	t.Helper()
	pebbletest.Binary(t)
	s := &sharedRigs{redis: redistest.Start(t, redistest.Options{Password: redisPassword})}
	for range n {
		o := opts
		o.Shared = &SharedStore{URL: s.redis.URL(), Password: redisPassword, Prefix: "shared-test", LockPoll: 50 * time.Millisecond}
		s.rigs = append(s.rigs, newRigPebble(t, o))
	}
	s.split = pebbletest.NewSplitter(t, func(v pebbletest.Validation) (string, error) {
		i, err := s.orderer(v.Name, 20*time.Second)
		if err != nil {
			return "", err
		}
		other := s.rigs[(i+1)%len(s.rigs)]
		if v.Kind == "http-01" {
			return other.httpAddr.String(), nil
		}
		return other.httpsAddr.String(), nil
	})
	s.peb = pebbletest.Start(t, pebbletest.Options{HTTPPort: s.split.HTTPPort, TLSPort: s.split.TLSPort, Validity: validity})
	s.front = s.peb.Front(t)
	for _, r := range s.rigs {
		r.mgr.opts.CA, r.mgr.opts.Roots = s.front.Directory, s.front.Roots
	}
	return s
}

// orderer waits up to limit for a rig to start ordering name and returns its index.
func (s *sharedRigs) orderer(name string, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for {
		for i, r := range s.rigs {
			if r.rec.has(is("obtaining", name)) {
				return i, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no rig orders %s", name)
		}
		time.Sleep(testwait.Poll)
	}
}

func (s *sharedRigs) apply(routes ...route) {
	for _, r := range s.rigs {
		r.apply(routes...)
	}
}

func (s *sharedRigs) start() {
	for _, r := range s.rigs {
		r.start()
	}
}

// converge waits until every rig loaded name and serves one certificate for it, checks
// that exactly one order was placed, by one rig, and that its validations were answered
// by another; it returns the serial and the time from the order's end to the last load.
func (s *sharedRigs) converge(t *testing.T, name string, roots *x509.CertPool) (*x509.Certificate, time.Duration) {
	t.Helper()
	var obtainedAt, lastLoad time.Time
	orderers := 0
	for _, r := range s.rigs {
		r.rec.wait(t, 0, name+" loaded", is("loaded", name))
	}
	for _, r := range s.rigs {
		for _, e := range r.rec.since(0) {
			if e.Hostname != name {
				continue
			}
			switch e.Kind {
			case "obtaining":
				orderers++
			case "obtained":
				obtainedAt = e.at
			case "loaded":
				if e.at.After(lastLoad) {
					lastLoad = e.at
				}
			}
		}
	}
	if orderers != 1 {
		t.Errorf("%s: %d rigs ordered, want 1", name, orderers)
	}
	if n := s.front.Orders(name); n != 1 {
		t.Errorf("%s: %d orders at the CA, want 1 (%v)", name, n, s.front.AllOrders())
	}
	var first *x509.Certificate
	for i, r := range s.rigs {
		leaf := r.waitServed(name, roots, nil)
		if first == nil {
			first = leaf
		} else if leaf.SerialNumber.Cmp(first.SerialNumber) != 0 {
			t.Errorf("%s: rig %d serves serial %s, rig 0 %s", name, i, leaf.SerialNumber, first.SerialNumber)
		}
	}
	orderer, _ := s.orderer(name, time.Second)
	var seen int
	for _, v := range s.split.Validations() {
		if v.Name != name {
			continue
		}
		seen++
		if v.To == s.rigs[orderer].httpAddr.String() || v.To == s.rigs[orderer].httpsAddr.String() || v.To == "" {
			t.Errorf("%s: the validation %+v went to the rig that ordered (%d) or nowhere", name, v, orderer)
		}
	}
	if seen == 0 {
		t.Errorf("%s: no validation went through the splitter", name)
	}
	return first, lastLoad.Sub(obtainedAt)
}

// TestSharedStoreOneOrder: two replicas sharing a store, for each challenge type: one
// order per name at the CA, placed by one replica, validated through the other (which
// answers from the token in the store), and both serve the same certificate; nothing is
// written to the replicas' disks.
func TestSharedStoreOneOrder(t *testing.T) {
	for _, ch := range []string{HTTP01, TLSALPN01} {
		t.Run(ch, func(t *testing.T) {
			t.Parallel()
			s := startShared(t, 2, 0, Options{Challenges: []string{ch}})
			// Names of their own: certmagic keeps the challenges under way in one map per
			// process, by name, and the subtests run at once.
			a, b := "a."+ch+".shared.test", "b."+ch+".shared.test"
			s.apply(route{host: a, acme: true}, route{host: b, acme: true})
			s.start()
			roots := s.peb.IssuingRoots(t)
			for _, name := range []string{a, b} {
				_, took := s.converge(t, name, roots)
				t.Logf("%s: every replica loaded the certificate %s after it was obtained", name, took)
			}
			for _, v := range s.split.Validations() {
				if v.Kind != ch {
					t.Errorf("validation %+v, want only %s", v, ch)
				}
			}
			for _, r := range s.rigs {
				if entries, _ := os.ReadDir(r.mgr.opts.Dir); len(entries) > 0 {
					t.Errorf("a replica with a shared store wrote to its directory: %v", entries)
				}
				r.mustGet("https://"+a+"/x", roots, 200)
			}
			if key := "shared-test:file:" + certmagic.StorageKeys.SiteCert(issuerKeyOf(t, s), a); s.redis.Do(t, "EXISTS", key) != ":1" {
				t.Errorf("the certificate is not in Redis at %s", key)
			}
			checkMetric(t, s.rigs[0].mgr, "ingress_acme_storage_up 1", "ingress_acme_storage_failures_total 0")
		})
	}
}

// issuerKeyOf is certmagic's issuer key of the rigs' CA (the directory under
// certificates/).
func issuerKeyOf(t *testing.T, s *sharedRigs) string {
	t.Helper()
	e := s.rigs[0].mgr.eng.Load()
	if e == nil {
		t.Fatal("not running")
	}
	return e.issuer.IssuerKey()
}

// TestSharedStoreDown: while Redis is stopped the replicas serve the certificates they
// hold, say once that the store does not answer (log, /readyz's explanation, metrics), and
// a name added meanwhile waits; once Redis is back it is obtained, once, with no other
// step.
func TestSharedStoreDown(t *testing.T) {
	t.Parallel()
	s := startShared(t, 2, 0, Options{})
	const held, added = "held.shared.test", "added.shared.test"
	s.apply(route{host: held, acme: true})
	s.start()
	roots := s.peb.IssuingRoots(t)
	before, _ := s.converge(t, held, roots)

	s.redis.Stop()
	s.apply(route{host: held, acme: true}, route{host: added, acme: true})
	for i, r := range s.rigs {
		testwait.UntilWhy(t, waitLimit, "the store reported down", func() (bool, string) {
			lines := r.mgr.Explain()
			return len(lines) > 1 && strings.HasPrefix(lines[1], "acme: degraded: the certificate store redis://:xxxxx@127.0.0.1:"), strings.Join(lines, "\n")
		})
		for range 10 {
			if leaf, err := r.handshake(held, roots); err != nil || leaf.SerialNumber.Cmp(before.SerialNumber) != 0 {
				t.Fatalf("rig %d with Redis down: %v", i, err)
			}
		}
		checkMetric(t, r.mgr, "ingress_acme_storage_up 0")
	}
	// Once, however often the store fails.
	for i, r := range s.rigs {
		if n := strings.Count(r.logs.String(), "the certificate store does not answer;"); n != 1 {
			t.Errorf("rig %d logged the store down %d times, want 1", i, n)
		}
		if strings.Contains(r.logs.String(), redisPassword) {
			t.Errorf("rig %d logged the password", i)
		}
	}

	s.redis.Restart(t)
	after, took := s.converge(t, added, roots)
	t.Logf("after Redis came back, %s was obtained (serial %s) and loaded everywhere within %s of it", added, after.SerialNumber, took)
	for i, r := range s.rigs {
		if lines := r.mgr.Explain(); strings.Contains(strings.Join(lines, "\n"), "degraded") {
			t.Errorf("rig %d still explains the store as down: %q", i, lines)
		}
		if !strings.Contains(r.logs.String(), "the certificate store answers again") {
			t.Errorf("rig %d did not log the store back", i)
		}
		if leaf, err := r.handshake(held, roots); err != nil || leaf.SerialNumber.Cmp(before.SerialNumber) != 0 {
			t.Errorf("rig %d after Redis came back: %v", i, err)
		}
	}
	if n := s.front.Orders(held); n != 1 {
		t.Errorf("%s was ordered %d times", held, n)
	}
}

// TestSharedStoreRenewsOnce: with certificates that live 12 s, two replicas sharing a
// store renew a name once (one of them orders, under the lock; the other finds the
// renewed certificate stored) and both serve the renewed certificate.
func TestSharedStoreRenewsOnce(t *testing.T) {
	t.Parallel()
	s := startShared(t, 2, 12*time.Second, Options{RenewCheckInterval: time.Second})
	const name = "renew.shared.test"
	s.apply(route{host: name, acme: true})
	s.start()
	roots := s.peb.IssuingRoots(t)
	first, _ := s.converge(t, name, roots)
	var renewed *x509.Certificate
	for i, r := range s.rigs {
		leaf := r.waitServed(name, roots, func(l *x509.Certificate) bool { return l.SerialNumber.Cmp(first.SerialNumber) != 0 })
		if renewed == nil {
			renewed = leaf
		}
		if leaf.SerialNumber.Cmp(renewed.SerialNumber) != 0 {
			// A second renewal may have come between the two checks; it must be newer.
			if !leaf.NotBefore.After(renewed.NotBefore) {
				t.Errorf("rig %d serves %s, not the renewed %s", i, leaf.SerialNumber, renewed.SerialNumber)
			}
		}
	}
	renewals := 0
	for _, r := range s.rigs {
		for _, e := range r.rec.since(0) {
			if e.Kind == "obtaining" && e.Hostname == name && e.Renewal {
				renewals++
			}
		}
	}
	// Both serve the first renewal seconds after it; the next is due 8 s later.
	if orders := s.front.Orders(name); renewals != 1 || orders != 2 {
		t.Errorf("%d renewal orders placed by the rigs and %d orders at the CA, want 1 and 2 (the first, then the renewal)", renewals, orders)
	}
}

// TestSharedStoreRefusals: a wrong password and an address where nothing answers fail
// CheckStore with a clear error that never holds the password.
func TestSharedStoreRefusals(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{Password: redisPassword})
	for _, c := range []struct {
		url, password, want string
	}{
		{srv.URL(), "wrong-" + redisPassword, "the server refused the user name or password (WRONGPASS"},
		{srv.URL(), "", "the server wants a password and was given none (NOAUTH"},
		{"redis://127.0.0.1:" + deadPort(t) + "/0", redisPassword, "cannot reach the server: dial tcp 127.0.0.1:"},
	} {
		m, err := New(nilTables{}, Options{Shared: &SharedStore{URL: c.url, Password: c.password, Prefix: "p"}})
		if err != nil {
			t.Fatal(err)
		}
		err = m.CheckStore(t.Context())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckStore(%s) = %v, want %q", c.url, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), redisPassword) {
			t.Errorf("the error holds the password: %v", err)
		}
		if m.shared != nil {
			_ = m.shared.Close()
		}
	}
	if _, err := New(nilTables{}, Options{Shared: &SharedStore{URL: "redis://h:1/0", Prefix: "a b"}}); err == nil || !strings.Contains(err.Error(), "prefix") {
		t.Errorf("a bad prefix: %v", err)
	}
}

package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ocsp"

	"github.com/serve-zone/ingress/routetable"
)

// OCSP stapling. For every certificate of the applied table whose leaf names an OCSP
// responder (and whose chain carries the issuer), the stapler, owned by the Server, fetches
// a response, keeps it fresh (refetched past half its validity) and publishes a stapled
// copy of the certificate. Fetches run concurrently, at most ocspFetchers at once, and each
// staple is published as soon as its response arrives: a slow responder delays only its
// own certificates. Staples are kept by leaf across tables, so a new table that carries a
// leaf already stapled serves the staple at once and fetches nothing until it is due. The
// handshake path does one atomic load and one map lookup; it never waits for a responder.
// A certificate without a good, current response is served without a staple.

const (
	ocspCheckEvery   = time.Second      // how often the stapler looks for a new table
	ocspRefreshEvery = time.Minute      // how often it re-judges staples of an unchanged table
	ocspRetryAfter   = 5 * time.Minute  // wait after a failed fetch
	ocspFetchTimeout = 10 * time.Second // one responder round trip
	ocspFetchers     = 8                // responder round trips at once
	ocspMaxResponse  = 1 << 20
)

// leafKey names a leaf certificate by the hash of its DER.
type leafKey = [sha256.Size]byte

// stapler keeps the staples. staples is read by handshakes; everything else is owned by
// the run goroutine (fetchers only read a stapleState's leaf and issuer).
type stapler struct {
	tables     TableSource
	client     *http.Client
	log        *zap.Logger
	now        func() time.Time
	checkEvery time.Duration // how often run looks for a new table (tests shorten it)
	fetchers   int           // the bound on concurrent fetches

	staples atomic.Pointer[map[*tls.Certificate]*tls.Certificate]

	// Owned by run.
	byLeaf  map[leafKey]*stapleState // the current table's leaves
	certs   []stapledCert            // the current table's certificates that have a responder
	queue   []*stapleState           // due, waiting for a fetcher, in table order
	running int                      // fetches in flight
}

// stapleState is one leaf's OCSP state, kept across table swaps by the leaf's hash.
type stapleState struct {
	key          leafKey
	id           string // the certificate id the current table gives the leaf (for logs)
	leaf, issuer *x509.Certificate

	response   []byte
	thisUpdate time.Time
	nextUpdate time.Time
	retryAt    time.Time
	queued     bool // in stapler.queue
	fetching   bool // a fetcher holds it
}

// stapledCert is one certificate of the current table and its stapled copy, rebuilt only
// when the leaf's response changes.
type stapledCert struct {
	cert    *tls.Certificate
	st      *stapleState
	stapled *tls.Certificate // nil until built; its OCSPStaple is the response it was built from
}

// fetchResult is what a fetcher hands back to run.
type fetchResult struct {
	st   *stapleState
	resp *ocsp.Response
	raw  []byte
	err  error
}

func newStapler(tables TableSource, log *zap.Logger) *stapler {
	return &stapler{
		tables:     tables,
		client:     &http.Client{Timeout: ocspFetchTimeout},
		log:        log,
		now:        time.Now,
		checkEvery: ocspCheckEvery,
		fetchers:   ocspFetchers,
		byLeaf:     map[leafKey]*stapleState{},
	}
}

// staple returns the stapled copy of cert when there is one, else cert.
func (s *stapler) staple(cert *tls.Certificate) *tls.Certificate {
	if m := s.staples.Load(); m != nil {
		if c := (*m)[cert]; c != nil {
			return c
		}
	}
	return cert
}

// run keeps the staples until ctx ends: it looks at a new table within a tick and
// re-judges the staples every ocspRefreshEvery otherwise, starts fetches up to the bound
// and publishes each response as it arrives. It returns once every fetch it started has
// returned. The first look waits for the first tick: at start the listeners and the
// first requests come before OCSP (a staple only spares the client a look-up), and a
// table of 1,000 certificates means 1,000 issuer parses.
func (s *stapler) run(ctx context.Context) {
	var fetches sync.WaitGroup
	defer fetches.Wait()
	results := make(chan fetchResult)
	t := time.NewTicker(s.checkEvery)
	defer t.Stop()
	var last *routetable.Compiled
	var next time.Time
	started := false
	for {
		if started {
			if cur := s.tables.Load(); cur != last || !s.now().Before(next) {
				if cur != last {
					s.adopt(cur)
				}
				s.schedule()
				s.publish()
				last, next = cur, s.now().Add(ocspRefreshEvery)
			}
			s.startFetches(ctx, &fetches, results)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			started = true
		case r := <-results:
			s.settle(r)
			// Results that arrived meanwhile are published together.
			for more := true; more; {
				select {
				case r := <-results:
					s.settle(r)
				default:
					more = false
				}
			}
			s.publish()
		}
	}
}

// adopt makes table the current one: its leaves keep the state (and staple) they had
// under an earlier table; leaves it no longer names are forgotten.
func (s *stapler) adopt(table *routetable.Compiled) {
	byLeaf := map[leafKey]*stapleState{}
	var certs []stapledCert
	if table != nil && table.Source != nil {
		for _, c := range table.Source.Certificates {
			cert := table.CertificateByID(c.ID)
			leaf, issuer := chainOf(cert)
			if leaf == nil || issuer == nil || len(leaf.OCSPServer) == 0 {
				continue
			}
			key := sha256.Sum256(leaf.Raw)
			st := byLeaf[key]
			if st == nil {
				if st = s.byLeaf[key]; st == nil {
					st = &stapleState{key: key, leaf: leaf, issuer: issuer}
				}
				st.id = c.ID
				byLeaf[key] = st
			}
			certs = append(certs, stapledCert{cert: cert, st: st})
		}
	}
	queue := s.queue[:0]
	for _, st := range s.queue {
		if byLeaf[st.key] == st {
			queue = append(queue, st)
		} else {
			st.queued = false
		}
	}
	s.byLeaf, s.certs, s.queue = byLeaf, certs, queue
}

// schedule queues every leaf of the current table that is due for a fetch: without a
// response, or past half its response's validity, and not waiting out a failure.
func (s *stapler) schedule() {
	now := s.now()
	for _, c := range s.certs {
		st := c.st
		if st.queued || st.fetching || now.Before(st.retryAt) {
			continue
		}
		if st.response != nil && now.Before(st.thisUpdate.Add(st.nextUpdate.Sub(st.thisUpdate)/2)) {
			continue
		}
		st.queued = true
		s.queue = append(s.queue, st)
	}
}

// startFetches starts queued fetches while fewer than s.fetchers run. Each fetcher hands
// its result to run through results, or drops it when ctx ends first.
func (s *stapler) startFetches(ctx context.Context, fetches *sync.WaitGroup, results chan<- fetchResult) {
	for s.running < s.fetchers && len(s.queue) > 0 && ctx.Err() == nil {
		st := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		st.queued, st.fetching = false, true
		s.running++
		s.log.Debug("fetching OCSP response", zap.String("certificateId", st.id))
		leaf, issuer := st.leaf, st.issuer
		fetches.Go(func() {
			resp, raw, err := s.fetch(ctx, leaf, issuer)
			select {
			case results <- fetchResult{st: st, resp: resp, raw: raw, err: err}:
			case <-ctx.Done():
			}
		})
	}
}

// settle records one fetch's result in its leaf's state.
func (s *stapler) settle(r fetchResult) {
	s.running--
	st := r.st
	st.fetching = false
	now := s.now()
	if r.err != nil {
		st.retryAt = now.Add(ocspRetryAfter)
		s.log.Warn("OCSP staple not refreshed", zap.String("certificateId", st.id), zap.Error(r.err))
		return
	}
	switch r.resp.Status {
	case ocsp.Good:
		st.response, st.thisUpdate, st.nextUpdate, st.retryAt = r.raw, r.resp.ThisUpdate, r.resp.NextUpdate, time.Time{}
		if st.nextUpdate.IsZero() {
			st.nextUpdate = r.resp.ThisUpdate.Add(24 * time.Hour) // no promise: assume a day
		}
	case ocsp.Revoked:
		st.response, st.retryAt = nil, now.Add(ocspRetryAfter)
		s.log.Error("certificate revoked according to its OCSP responder; served without a staple",
			zap.String("certificateId", st.id), zap.Time("revokedAt", r.resp.RevokedAt))
	default:
		st.retryAt = now.Add(ocspRetryAfter)
		s.log.Warn("OCSP responder does not know the certificate", zap.String("certificateId", st.id))
	}
}

// publish stores the stapled copies of the current table's certificates whose leaf has a
// good, current response. A copy is rebuilt only when its response changed: the table's
// certificates are shared and stay unmodified.
func (s *stapler) publish() {
	now := s.now()
	out := make(map[*tls.Certificate]*tls.Certificate, len(s.certs))
	for i := range s.certs {
		c := &s.certs[i]
		st := c.st
		if st.response == nil || !now.Before(st.nextUpdate) {
			continue
		}
		if c.stapled == nil || !sameBytes(c.stapled.OCSPStaple, st.response) {
			stapled := *c.cert
			stapled.OCSPStaple = st.response
			c.stapled = &stapled
		}
		out[c.cert] = c.stapled
	}
	s.staples.Store(&out)
}

// sameBytes reports whether a and b are the same slice (not merely equal bytes): a
// response is replaced, never modified.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ocsp"

	"github.com/serve-zone/ingress/routetable"
)

// OCSP stapling. For every certificate of the applied table whose leaf names an OCSP
// responder (and whose chain carries the issuer), a stapler goroutine owned by the Server
// fetches a response, keeps it fresh (refetched past half its validity) and publishes a
// stapled copy of the certificate. The handshake path does one atomic load and one map
// lookup; it never waits for a responder. A certificate without a good, current response
// is served without a staple.

const (
	ocspCheckEvery   = time.Second      // how often the stapler looks for a new table
	ocspRefreshEvery = time.Minute      // how often it re-judges staples of an unchanged table
	ocspRetryAfter   = 5 * time.Minute  // wait after a failed fetch
	ocspFetchTimeout = 10 * time.Second // one responder round trip
	ocspMaxResponse  = 1 << 20
)

// stapler keeps the staples. staples is read by handshakes; everything else is owned by
// the run goroutine.
type stapler struct {
	tables TableSource
	client *http.Client
	log    *zap.Logger
	now    func() time.Time

	staples atomic.Pointer[map[*tls.Certificate]*tls.Certificate]

	byLeaf map[[sha256.Size]byte]*stapleState // owned by run
}

// stapleState is one leaf's OCSP state, kept across table swaps by the leaf's hash.
type stapleState struct {
	response   []byte
	thisUpdate time.Time
	nextUpdate time.Time
	retryAt    time.Time
}

func newStapler(tables TableSource, log *zap.Logger) *stapler {
	return &stapler{
		tables: tables,
		client: &http.Client{Timeout: ocspFetchTimeout},
		log:    log,
		now:    time.Now,
		byLeaf: map[[sha256.Size]byte]*stapleState{},
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

// run refreshes staples until ctx ends: within ocspCheckEvery of every new table, every
// minute otherwise. The first pass waits for the first tick: at start the listeners and
// the first requests come before OCSP (a staple only spares the client a look-up), and
// a table of 1,000 certificates means 1,000 issuer parses and responder round trips.
func (s *stapler) run(ctx context.Context) {
	t := time.NewTicker(ocspCheckEvery)
	defer t.Stop()
	var last *routetable.Compiled
	var next time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if cur := s.tables.Load(); cur != last || !s.now().Before(next) {
			s.refresh(ctx, cur)
			last, next = cur, s.now().Add(ocspRefreshEvery)
		}
	}
}

// refresh fetches what is missing or stale for table and publishes the stapled copies.
func (s *stapler) refresh(ctx context.Context, table *routetable.Compiled) {
	out := map[*tls.Certificate]*tls.Certificate{}
	keep := map[[sha256.Size]byte]*stapleState{}
	if table != nil && table.Source != nil {
		for _, c := range table.Source.Certificates {
			cert := table.CertificateByID(c.ID)
			leaf, issuer := chainOf(cert)
			if leaf == nil || issuer == nil || len(leaf.OCSPServer) == 0 {
				continue
			}
			key := sha256.Sum256(leaf.Raw)
			st := keep[key]
			if st == nil {
				if st = s.byLeaf[key]; st == nil {
					st = &stapleState{}
				}
				keep[key] = st
				s.update(ctx, c.ID, st, leaf, issuer)
			}
			if st.response != nil && s.now().Before(st.nextUpdate) {
				stapled := *cert
				stapled.OCSPStaple = st.response
				out[cert] = &stapled
			}
		}
	}
	s.byLeaf = keep
	s.staples.Store(&out)
}

// update fetches a response for leaf when it has none or is past half its validity.
func (s *stapler) update(ctx context.Context, id string, st *stapleState, leaf, issuer *x509.Certificate) {
	now := s.now()
	fresh := st.response != nil && now.Before(st.thisUpdate.Add(st.nextUpdate.Sub(st.thisUpdate)/2))
	if fresh || now.Before(st.retryAt) || ctx.Err() != nil {
		return
	}
	resp, raw, err := s.fetch(ctx, leaf, issuer)
	if err != nil {
		st.retryAt = now.Add(ocspRetryAfter)
		s.log.Warn("OCSP staple not refreshed", zap.String("certificateId", id), zap.Error(err))
		return
	}
	switch resp.Status {
	case ocsp.Good:
		st.response, st.thisUpdate, st.nextUpdate, st.retryAt = raw, resp.ThisUpdate, resp.NextUpdate, time.Time{}
		if st.nextUpdate.IsZero() {
			st.nextUpdate = resp.ThisUpdate.Add(24 * time.Hour) // no promise: assume a day
		}
	case ocsp.Revoked:
		st.response, st.retryAt = nil, now.Add(ocspRetryAfter)
		s.log.Error("certificate revoked according to its OCSP responder; served without a staple",
			zap.String("certificateId", id), zap.Time("revokedAt", resp.RevokedAt))
	default:
		st.retryAt = now.Add(ocspRetryAfter)
		s.log.Warn("OCSP responder does not know the certificate", zap.String("certificateId", id))
	}
}

func (s *stapler) fetch(ctx context.Context, leaf, issuer *x509.Certificate) (*ocsp.Response, []byte, error) {
	reqBody, err := ocsp.CreateRequest(leaf, issuer, nil)
	if err != nil {
		return nil, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, leaf.OCSPServer[0], bytes.NewReader(reqBody))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/ocsp-request")
	res, err := s.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("OCSP responder answered %s", res.Status)
	}
	raw, err := io.ReadAll(io.LimitReader(res.Body, ocspMaxResponse))
	if err != nil {
		return nil, nil, err
	}
	resp, err := ocsp.ParseResponseForCert(raw, leaf, issuer)
	if err != nil {
		return nil, nil, err
	}
	return resp, raw, nil
}

// chainOf returns the parsed leaf and its issuer (the next certificate of the chain), or
// nils when the chain has no issuer.
func chainOf(cert *tls.Certificate) (leaf, issuer *x509.Certificate) {
	if cert == nil || len(cert.Certificate) < 2 {
		return nil, nil
	}
	leaf = cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, nil
		}
	}
	issuer, err := x509.ParseCertificate(cert.Certificate[1])
	if err != nil {
		return nil, nil
	}
	return leaf, issuer
}

package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"

	"golang.org/x/crypto/ocsp"
)

// fetch asks leaf's first OCSP responder for its status (one POST, bounded by the client's
// timeout and ctx) and returns the parsed response with its raw bytes.
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

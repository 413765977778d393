// Package testcert makes throwaway self-signed certificates for tests and the demo. Its
// keys are generated fresh on every call and must never be used to protect anything.
package testcert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"time"
)

// KeyFormat selects how the private key is encoded.
type KeyFormat uint8

const (
	// PKCS8 is "PRIVATE KEY" (the zero value).
	PKCS8 KeyFormat = iota
	// SEC1 is "EC PRIVATE KEY" (ECDSA keys only).
	SEC1
	// PKCS1 is "RSA PRIVATE KEY" (RSA keys only).
	PKCS1
)

// Options describe a certificate. The zero value is a P-256 leaf for no names, valid from
// an hour ago for one year, key in PKCS#8.
type Options struct {
	// Hosts become DNS SANs ("*.example.test" makes a wildcard SAN); the first is also
	// the subject common name.
	Hosts []string
	// NotBefore and NotAfter bound validity; zero means an hour ago and a year later.
	NotBefore, NotAfter time.Time
	// RSA makes a 2048-bit RSA key instead of ECDSA P-256 (slow: keep it to a few tests).
	RSA bool
	// Format is the private key encoding.
	Format KeyFormat
	// Chain signs the leaf with a fresh CA and appends the CA to the certificate PEM.
	Chain bool
}

// Generate returns a self-signed ECDSA P-256 leaf valid for one year covering hosts (DNS
// names, wildcards included), and its PKCS#8 key, both PEM-encoded.
func Generate(hosts ...string) (certPEM, keyPEM string, err error) {
	return New(Options{Hosts: hosts})
}

// New returns a certificate and key as o describes, both PEM-encoded.
func New(o Options) (certPEM, keyPEM string, err error) {
	now := time.Now()
	if o.NotBefore.IsZero() {
		o.NotBefore = now.Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = o.NotBefore.Add(365 * 24 * time.Hour)
	}
	key, err := newKey(o.RSA)
	if err != nil {
		return "", "", err
	}
	leaf := &x509.Certificate{
		SerialNumber:          serial(),
		NotBefore:             o.NotBefore,
		NotAfter:              o.NotAfter,
		DNSNames:              o.Hosts,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if len(o.Hosts) > 0 {
		leaf.Subject = pkix.Name{CommonName: o.Hosts[0]}
	}
	parent, signer := leaf, crypto.Signer(key)
	var caDER []byte
	if o.Chain {
		caKey, err := newKey(false)
		if err != nil {
			return "", "", err
		}
		ca := &x509.Certificate{
			SerialNumber:          serial(),
			Subject:               pkix.Name{CommonName: "testcert CA"},
			NotBefore:             o.NotBefore,
			NotAfter:              o.NotAfter,
			KeyUsage:              x509.KeyUsageCertSign,
			BasicConstraintsValid: true,
			IsCA:                  true,
		}
		if caDER, err = x509.CreateCertificate(rand.Reader, ca, ca, caKey.Public(), caKey); err != nil {
			return "", "", err
		}
		if parent, err = x509.ParseCertificate(caDER); err != nil {
			return "", "", err
		}
		signer = caKey
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, parent, key.Public(), signer)
	if err != nil {
		return "", "", err
	}
	certPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	if caDER != nil {
		certPEM += string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	}
	var block *pem.Block
	switch o.Format {
	case PKCS8:
		b, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return "", "", err
		}
		block = &pem.Block{Type: "PRIVATE KEY", Bytes: b}
	case SEC1:
		k, ok := key.(*ecdsa.PrivateKey)
		if !ok {
			return "", "", errors.New("testcert: SEC 1 needs an ECDSA key")
		}
		b, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return "", "", err
		}
		block = &pem.Block{Type: "EC PRIVATE KEY", Bytes: b}
	case PKCS1:
		k, ok := key.(*rsa.PrivateKey)
		if !ok {
			return "", "", errors.New("testcert: PKCS#1 needs an RSA key")
		}
		block = &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}
	default:
		return "", "", errors.New("testcert: unknown key format")
	}
	return certPEM, string(pem.EncodeToMemory(block)), nil
}

func newKey(useRSA bool) (crypto.Signer, error) {
	if useRSA {
		return rsa.GenerateKey(rand.Reader, 2048)
	}
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(1)
	}
	return n
}

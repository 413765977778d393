package routetable

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"time"

	"github.com/serve-zone/ingress/internal/jsonx"
)

// parseCertificate judges one IClusterIngressCertificate's PEM fields and returns the
// ready-to-serve key pair (nil when any of its rules failed) and a warning for a leaf
// outside its validity window (expired) or close to its end. Messages are fixed
// sentences: the parsers' own error texts are never passed on, so no byte of a key can
// reach a log. Violations of PEM read from a file name the file's member
// (certificateFile, privateKeyFile).
func parseCertificate(c *Certificate, path string, now time.Time, e *jsonx.Errors) (kp *tls.Certificate, warning string, expired bool) {
	certPath, keyPath := path+".certificatePem", path+".privateKeyPem"
	if c.CertificateFile != "" {
		certPath = path + ".certificateFile"
	}
	if c.PrivateKeyFile != "" {
		keyPath = path + ".privateKeyFile"
	}
	var (
		chain [][]byte
		leaf  *x509.Certificate
		ok    = true
	)
	rest := []byte(c.CertificatePEM)
	for n := 0; ; n++ {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			e.Addf(certPath, "block %d must be a PEM CERTIFICATE block", n)
			ok = false
			continue
		}
		x, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			e.Addf(certPath, "block %d is not a parsable X.509 certificate", n)
			ok = false
			continue
		}
		if n == 0 {
			leaf = x
		}
		chain = append(chain, b.Bytes)
	}
	if len(chain) == 0 && ok {
		e.Addf(certPath, "must hold PEM CERTIFICATE blocks, the leaf first, then its chain")
		ok = false
	}

	key := parsePrivateKey(c.PrivateKeyPEM, keyPath, e)
	if key == nil || leaf == nil || !ok {
		return nil, "", false
	}
	pub, isEq := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !isEq || !pub.Equal(key.Public()) {
		e.Addf(keyPath, "does not match the leaf certificate's public key")
		return nil, "", false
	}
	kp = &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}
	warning, expired = expiryWarning(path, c.ID, leaf.NotBefore, leaf.NotAfter, now)
	return kp, warning, expired
}

// parsePrivateKey reads one PKCS#1, PKCS#8 or SEC 1 private key (an "EC PARAMETERS"
// block before it, as openssl writes one, is skipped).
func parsePrivateKey(s string, path string, e *jsonx.Errors) crypto.Signer {
	const want = "must hold exactly one PEM private key: PKCS#1 (RSA PRIVATE KEY), PKCS#8 (PRIVATE KEY) or SEC 1 (EC PRIVATE KEY)"
	var (
		key   crypto.Signer
		count int
		bad   bool
	)
	rest := []byte(s)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type == "EC PARAMETERS" {
			continue
		}
		count++
		var (
			k   any
			err error
		)
		switch b.Type {
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(b.Bytes)
		default:
			bad = true
			continue
		}
		if err != nil {
			e.Addf(path, "is not a parsable %s", b.Type)
			return nil
		}
		switch k := k.(type) {
		case *rsa.PrivateKey:
			key = k
		case *ecdsa.PrivateKey:
			key = k
		case ed25519.PrivateKey:
			key = k
		default:
			e.Addf(path, "must be an RSA, ECDSA or Ed25519 key")
			return nil
		}
	}
	if count != 1 || bad || key == nil {
		e.Addf(path, want)
		return nil
	}
	return key
}

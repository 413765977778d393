package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/acme"
	"github.com/serve-zone/ingress/env"
	"github.com/serve-zone/ingress/routetable"
)

// Automatic HTTPS (contract §7): the --acme-* flags, what an ACME route needs from the
// rest of the configuration, and the wiring of the acme package.

// acmeOptions are the --acme-* settings.
type acmeOptions struct {
	CA         string
	Email      string
	CARoot     string
	Agree      bool
	Challenges string
	// Storage, StoragePasswordFile and StoragePrefix are the shared store of several
	// replicas (--acme-storage): the certificates, the account and the challenges under
	// way live in Redis instead of under --state-dir.
	Storage             string
	StoragePasswordFile string
	StoragePrefix       string

	roots           *x509.CertPool // derived by loadACMERoots
	challenges      []string       // derived by validateACME
	storagePassword string         // derived by loadACMERoots, from StoragePasswordFile
}

// acmeStorageDir is where, under --state-dir, certmagic keeps certificates and the
// account key.
const acmeStorageDir = "acme"

func (o *options) acmeFlags(fs *flag.FlagSet) {
	a := &o.ACME
	a.defaults()
	fs.StringVar(&a.CA, "acme-ca", a.CA, "ACME directory URL the certificates of tls.acme routes (standalone mode) and of ingress proxy --acme come from")
	fs.StringVar(&a.Email, "acme-email", a.Email, "contact address of the ACME account (optional; the CA may send expiry notices there)")
	fs.StringVar(&a.CARoot, "acme-ca-root", a.CARoot, "PEM file of CA certificates trusted for --acme-ca besides the system roots (a private CA)")
	fs.BoolVar(&a.Agree, "acme-agree", a.Agree, "agree to the ACME CA's terms of service (required when its directory names terms, as Let's Encrypt's does)")
	fs.StringVar(&a.Challenges, "acme-challenges", a.Challenges, "challenge types answered, comma-separated: http-01 (on --http-addr), tls-alpn-01 (on --https-addr)")
	fs.StringVar(&a.Storage, "acme-storage", a.Storage, "keep the ACME certificates, their keys, the account and the challenges under way in Redis, shared by every replica that names it (one order per name, any replica answers the CA): redis://[user:password@]host:port/db, or rediss:// for TLS; the password is never logged")
	fs.StringVar(&a.StoragePasswordFile, "acme-storage-password-file", a.StoragePasswordFile, "file holding the password of --acme-storage (one trailing newline dropped), instead of one in the URL")
	fs.StringVar(&a.StoragePrefix, "acme-storage-prefix", a.StoragePrefix, "prefix of every key of --acme-storage, so that several clusters share one Redis (letters, digits and . _ - : /)")
}

// defaults fills what was not set: Let's Encrypt, both challenge types.
func (a *acmeOptions) defaults() {
	if a.CA == "" {
		a.CA = acme.DefaultCA
	}
	if a.Challenges == "" {
		a.Challenges = acme.HTTP01 + "," + acme.TLSALPN01
	}
	if a.StoragePrefix == "" {
		a.StoragePrefix = acme.DefaultStoragePrefix
	}
}

// validateACME judges the --acme-* flags (without reading files).
func (o *options) validateACME(bad func(string, ...any)) {
	a := &o.ACME
	a.defaults()
	a.challenges = nil
	for _, c := range strings.Split(a.Challenges, ",") {
		switch c = strings.TrimSpace(c); c {
		case acme.HTTP01, acme.TLSALPN01:
			a.challenges = append(a.challenges, c)
		case "":
		default:
			bad("--acme-challenges: %q is not a challenge type (http-01, tls-alpn-01)", c)
		}
	}
	if len(a.challenges) == 0 {
		bad("--acme-challenges names no challenge type (http-01, tls-alpn-01)")
	}
	if err := acme.CheckCA(a.CA); err != nil {
		bad("--acme-ca: %s", strings.TrimPrefix(err.Error(), "acme: "))
	}
	switch {
	case a.Storage != "":
		// The refusals never quote the URL: it may hold the password.
		if _, err := acme.CheckStorage(a.Storage, a.StoragePrefix); err != nil {
			for _, line := range splitLines(err) {
				switch {
				case strings.HasPrefix(line, "the key prefix "):
					bad("--acme-storage-prefix: %s", strings.TrimPrefix(line, "the key prefix "))
				default:
					bad("--acme-storage: %s", line)
				}
			}
		} else if a.StoragePasswordFile != "" && acme.StorageHasPassword(a.Storage) {
			bad("--acme-storage has a password and --acme-storage-password-file gives one too: give only one")
		}
	case a.StoragePasswordFile != "":
		bad("--acme-storage-password-file has no use without --acme-storage")
	}
}

// maxPasswordBytes bounds the password file.
const maxPasswordBytes = 4096

// loadACMERoots reads the --acme-* files: --acme-ca-root into a pool with the system
// roots, and --acme-storage-password-file.
func (o *options) loadACMERoots() error {
	a := &o.ACME
	a.storagePassword = ""
	if a.StoragePasswordFile != "" {
		b, err := os.ReadFile(a.StoragePasswordFile)
		if err != nil {
			// The path is not secret, the content is: the error names only the path.
			return fmt.Errorf("--acme-storage-password-file: cannot read %q: %v", a.StoragePasswordFile, errors.Unwrap(err))
		}
		pw := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		switch {
		case pw == "":
			return fmt.Errorf("--acme-storage-password-file %s is empty", a.StoragePasswordFile)
		case len(pw) > maxPasswordBytes || strings.ContainsAny(pw, "\r\n"):
			return fmt.Errorf("--acme-storage-password-file %s must hold one line of at most %d bytes", a.StoragePasswordFile, maxPasswordBytes)
		}
		a.storagePassword = pw
	}
	a.roots = nil
	if a.CARoot == "" {
		return nil
	}
	pem, err := os.ReadFile(a.CARoot)
	if err != nil {
		return fmt.Errorf("--acme-ca-root: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("--acme-ca-root %s holds no PEM certificate", a.CARoot)
	}
	a.roots = pool
	return nil
}

// acmeCheck is the Store's extra rule (StoreOptions.Check): a table whose routes use
// "tls.acme" is refused when this ingress cannot keep ACME certificates (no --state-dir),
// cannot serve them (no --https-addr), or cannot answer any challenge. At start this
// refuses the routes file (exit 2); later, an edit that adds such a route is refused and
// the previous table keeps serving.
func acmeCheck(o options) func(*routetable.Table) []string {
	var missing []string
	if o.StateDir == "" && o.ACME.Storage == "" {
		missing = append(missing, "--state-dir (where its certificate and the ACME account key are kept across restarts; or --acme-storage, where replicas share them)")
	}
	if o.HTTPSAddr == "" {
		missing = append(missing, "--https-addr (the TLS listener that serves its certificate)")
	} else if o.HTTPAddr == "" && !slices.Contains(o.ACME.challenges, acme.TLSALPN01) {
		missing = append(missing, "a challenge it can answer (--acme-challenges http-01 needs --http-addr)")
	}
	return func(t *routetable.Table) []string {
		if len(missing) == 0 {
			return nil
		}
		var v []string
		for i, r := range t.Routes {
			if r.TLS != nil && r.TLS.ACME {
				v = append(v, fmt.Sprintf("routes[%d].tls.acme (%s): automatic HTTPS needs %s",
					i, r.Hostname, strings.Join(missing, " and ")))
			}
		}
		return v
	}
}

// storageCheckTimeout bounds the first contact with --acme-storage at start.
const storageCheckTimeout = 10 * time.Second

// newACME builds the ACME manager of a standalone instance: nil when there is no store
// (state directory or --acme-storage) or no TLS listener (acmeCheck then refuses every
// table with an ACME route). With --acme-storage it makes sure the store answers and
// takes the password: a wrong one, or an address where nothing answers, refuses the
// configuration.
func newACME(o options, tables acme.TableSource, log *zap.Logger) (*acme.Manager, error) {
	if (o.StateDir == "" && o.ACME.Storage == "") || o.HTTPSAddr == "" {
		return nil, nil
	}
	opts := acme.Options{
		CA:         o.ACME.CA,
		Email:      o.ACME.Email,
		Agreed:     o.ACME.Agree,
		Roots:      o.ACME.roots,
		Challenges: o.ACME.challenges,
		Logger:     log.Named("acme"),
	}
	if o.ACME.Storage != "" {
		secret := env.NewBearer(acme.StoragePassword(o.ACME.Storage, o.ACME.storagePassword))
		opts.Shared = &acme.SharedStore{
			URL:      o.ACME.Storage,
			Password: o.ACME.storagePassword,
			Prefix:   o.ACME.StoragePrefix,
			Redact:   secret.Scrubber(),
		}
	} else {
		opts.Dir = filepath.Join(o.StateDir, acmeStorageDir)
	}
	m, err := acme.New(tables, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), storageCheckTimeout)
	defer cancel()
	if err := m.CheckStore(ctx); err != nil {
		return nil, fmt.Errorf("--acme-storage %w", err)
	}
	return m, nil
}

// explain is the part of /readyz's body beyond ready/not ready: where the ACME routes
// stand.
func (in *instance) explain() []string {
	if in.acme == nil {
		return nil
	}
	return in.acme.Explain()
}

// acmeGetCertificate, acmeNextProtos and acmeHTTPChallenge are the proxy's hooks: nil
// without an ACME manager.
func (in *instance) acmeGetCertificate() func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if in.acme == nil {
		return nil
	}
	return in.acme.GetCertificate
}

func (in *instance) acmeNextProtos() []string {
	if in.acme == nil {
		return nil
	}
	return []string{acme.ALPNProto}
}

func (in *instance) acmeHTTPChallenge() func(http.ResponseWriter, *http.Request) bool {
	if in.acme == nil {
		return nil
	}
	return in.acme.HandleHTTPChallenge
}

func init() {
	for name, p := range map[string]string{"acme-ca": "URL", "acme-ca-root": "FILE", "acme-email": "ADDRESS", "acme-challenges": "TYPES",
		"acme-storage": "URL", "acme-storage-password-file": "FILE", "acme-storage-prefix": "PREFIX"} {
		placeholders[name] = p
	}
}

package acme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	acmez "github.com/mholt/acmez/v3/acme"
	"go.uber.org/zap"

	"github.com/serve-zone/ingress/acme/internal/redisstore"
	"github.com/serve-zone/ingress/internal/jsonx"
	"github.com/serve-zone/ingress/routetable"
)

// DefaultCA is Let's Encrypt's production directory.
const DefaultCA = certmagic.LetsEncryptProductionCA

// ALPNProto is the ALPN protocol of the TLS-ALPN-01 challenge (RFC 8737): the TLS listener
// offers it after h2 and http/1.1 (proxy.Config.NextProtos).
const ALPNProto = "acme-tls/1"

// Challenge types, for Options.Challenges.
const (
	HTTP01    = "http-01"
	TLSALPN01 = "tls-alpn-01"
)

// TableSource yields the table being served; *routetable.Store satisfies it.
type TableSource interface {
	Load() *routetable.Compiled
}

// Options configure a Manager.
type Options struct {
	// CA is the ACME directory URL; "" means DefaultCA.
	CA string
	// Email is the account's contact; "" registers an account without one.
	Email string
	// Agreed accepts the CA's terms of service. A CA whose directory names terms is asked
	// for no account until it is true: each attempt fails with kind "terms".
	Agreed bool
	// Roots are the certificates trusted for the CA's HTTPS endpoint; nil means the
	// system's roots.
	Roots *x509.CertPool
	// Dir keeps the certificates, their keys and the account key (certmagic's FileStorage:
	// directories 0700, files 0600). Required unless Shared is set.
	Dir string
	// Shared, when set, keeps them in Redis instead, shared with every replica that
	// names the same store (Dir is then not used).
	Shared *SharedStore
	// Challenges are the challenge types answered: HTTP01 and TLSALPN01; nil means both.
	// HTTP-01 also needs the plain listener and TLS-ALPN-01 the TLS one (Run).
	Challenges []string
	// Logger receives the manager's lines and certmagic's (its routine lines at debug
	// level); nil means zap.NewNop().
	Logger *zap.Logger

	// RenewCheckInterval is how often certificates are checked for renewal (0 means
	// certmagic's 10 minutes); RenewalWindowRatio the part of a certificate's lifetime
	// before its end where renewal starts (0 means a third). Tests shorten both.
	RenewCheckInterval time.Duration
	RenewalWindowRatio float64
	// TableCheckInterval is how often the table is looked at for a swap (0 means 1 s).
	TableCheckInterval time.Duration
}

// departedMemory is how long a hostname that left the table is swept out of certmagic's
// cache again, every sweepEvery, in case a renewal that was already running when it left
// put its certificate back (it is never served again either way: handshakes ask for
// managed hostnames only).
const (
	departedMemory = time.Hour
	sweepEvery     = 10 * time.Second
)

// Manager obtains and renews the certificates of the table's ACME routes. Create it with
// New, hand its hooks to the proxy, then Run it once the listeners are bound. Its methods
// are safe for concurrent use.
type Manager struct {
	tables TableSource
	opts   Options
	log    *zap.Logger // the manager's own lines
	cmLog  *zap.Logger // certmagic's (filtered)
	eng    atomic.Pointer[engine]
	client *http.Client // the directory look-up of the terms check

	// names is the managed set the handshake path reads; replaced whole under mu.
	names atomic.Pointer[map[string]struct{}]

	mu       sync.Mutex
	hosts    map[string]*host     // managed hostnames
	departed map[string]time.Time // hostnames that left, and when
	wildcard []string             // ACME routes that cannot be obtained (DNS-01 only)

	metrics *metrics

	// shared and health are the shared store and how it answers (nil without one).
	shared *redisstore.Store
	health *storeHealth

	// managing are the goroutines that get a hostname's certificate into the cache
	// (manage); Run waits for them.
	managing sync.WaitGroup

	// started is closed once Run has loaded the stored certificates of the first table's
	// hostnames (Started).
	started   chan struct{}
	startOnce sync.Once

	// notify, when set (tests), sees every event after the manager handled it.
	notify func(event)
}

// engine is certmagic, set up by Run (nil before): its certificate cache (with the
// maintenance goroutine that renews), its configuration and the ACME issuer.
type engine struct {
	store  *ownedStorage
	cache  *certmagic.Cache
	cfg    *certmagic.Config
	issuer *certmagic.ACMEIssuer
}

// host is one managed hostname's state. Its fields are guarded by Manager.mu.
type host struct {
	name   string
	cancel context.CancelFunc

	obtaining bool      // an order is under way
	attempts  int       // failed attempts since the last success
	lastErr   string    // the last failure, as logged
	lastKind  string    // its kind (failureKinds)
	lastAt    time.Time // when it failed
}

// event is what the manager saw happen (tests watch them through Manager.notify).
type event struct {
	// Kind is "obtaining", "obtained", "failed", "vetoed" (an order for a name not
	// managed was stopped), "loaded" (a certificate was put into the cache, from storage
	// or after an order), "managed" and "unmanaged".
	Kind     string
	Hostname string
	Renewal  bool
	// FailureKind and Err are set for "failed".
	FailureKind string
	Err         error
	// at is when it happened (emitLocal sets it).
	at time.Time
}

// New checks opts and builds a Manager; it contacts nothing and starts nothing (Run does).
func New(tables TableSource, opts Options) (*Manager, error) {
	if tables == nil {
		return nil, errors.New("acme: a table source is required")
	}
	if opts.Dir == "" && opts.Shared == nil {
		return nil, errors.New("acme: a storage directory or a shared store is required")
	}
	if opts.CA == "" {
		opts.CA = DefaultCA
	}
	if err := CheckCA(opts.CA); err != nil {
		return nil, err
	}
	if opts.Challenges == nil {
		opts.Challenges = []string{HTTP01, TLSALPN01}
	}
	for _, c := range opts.Challenges {
		if c != HTTP01 && c != TLSALPN01 {
			return nil, fmt.Errorf("acme: unknown challenge type %q (want %s or %s)", c, HTTP01, TLSALPN01)
		}
	}
	if opts.TableCheckInterval <= 0 {
		opts.TableCheckInterval = time.Second
	}
	m := &Manager{
		tables:   tables,
		opts:     opts,
		log:      opts.Logger,
		hosts:    map[string]*host{},
		departed: map[string]time.Time{},
		metrics:  newMetrics(),
		started:  make(chan struct{}),
	}
	if m.log == nil {
		m.log = zap.NewNop()
	}
	m.cmLog = certmagicLogger(m.log)
	empty := map[string]struct{}{}
	m.names.Store(&empty)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if opts.Roots != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: opts.Roots, MinVersion: tls.VersionTLS12}
	}
	m.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	if opts.Shared != nil {
		if err := m.newShared(opts.Shared); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// CheckCA judges an ACME directory URL: https, or http only to a loopback host.
func CheckCA(ca string) error {
	u, err := url.Parse(ca)
	if err != nil {
		return fmt.Errorf("acme: CA directory %q is not a URL: %v", ca, err)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && isLoopback(u.Hostname()):
	default:
		return fmt.Errorf("acme: CA directory %q must be an https:// URL (http:// only on loopback)", ca)
	}
	if u.Host == "" {
		return fmt.Errorf("acme: CA directory %q has no host", ca)
	}
	return nil
}

func (m *Manager) challenge(c string) bool {
	for _, x := range m.opts.Challenges {
		if x == c {
			return true
		}
	}
	return false
}

// Run manages the table's ACME hostnames until ctx ends: it follows table swaps, lets
// certmagic obtain and renew, and stops certmagic's maintenance on the way out. httpAddr
// and httpsAddr are the proxy's bound plain and TLS listeners (nil for one that is off):
// HTTP-01 is answered only with a plain listener, TLS-ALPN-01 only with a TLS one, and
// certmagic never opens a listener of its own. Call it once.
func (m *Manager) Run(ctx context.Context, httpAddr, httpsAddr net.Addr) error {
	e, err := m.newEngine(httpAddr, httpsAddr)
	if err != nil {
		return err
	}
	m.eng.Store(e)
	var watching sync.WaitGroup
	defer m.stop(e, &watching)
	defer m.startOnce.Do(func() { close(m.started) }) // a Run that failed or ended early
	if m.shared != nil {
		m.health.active.Store(true)
		watching.Go(func() { m.watchStore(ctx) })
	}

	t := time.NewTicker(m.opts.TableCheckInterval)
	defer t.Stop()
	var last *routetable.Compiled
	var swept time.Time
	for {
		if c := m.tables.Load(); c != last {
			last = c
			m.sync(ctx, e, c)
			m.startOnce.Do(func() { close(m.started) })
		}
		if now := time.Now(); now.Sub(swept) >= sweepEvery {
			swept = now
			m.sweepDeparted(e)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Started is closed once Run has put the stored certificates of the first table's
// hostnames into the cache (or has ended): a TLS listener that waits for it serves a
// restarted ingress's certificates from its first handshake.
func (m *Manager) Started() <-chan struct{} { return m.started }

// newEngine sets certmagic up: a cache whose maintenance renews, a configuration whose
// storage is Options.Dir and whose events come to onEvent, and the ACME issuer. The
// issuer's solvers "listen" on the proxy's own addresses, find them taken (by the proxy,
// which answers through the hooks) and go on.
func (m *Manager) newEngine(httpAddr, httpsAddr net.Addr) (*engine, error) {
	tmpl := certmagic.ACMEIssuer{
		CA:                      m.opts.CA,
		Email:                   m.opts.Email,
		Agreed:                  m.opts.Agreed,
		TrustedRoots:            m.opts.Roots,
		Logger:                  m.cmLog,
		NewAccountFunc:          m.newAccount,
		DisableHTTPChallenge:    true,
		DisableTLSALPNChallenge: true,
	}
	if m.opts.CA != DefaultCA {
		tmpl.TestCA = m.opts.CA // no detour to Let's Encrypt's staging CA on retries
	}
	var host string
	if ap, ok := tcpAddr(httpAddr); ok && m.challenge(HTTP01) {
		tmpl.DisableHTTPChallenge = false
		tmpl.AltHTTPPort = ap.Port
		host = listenHost(ap)
	}
	if ap, ok := tcpAddr(httpsAddr); ok && m.challenge(TLSALPN01) {
		tmpl.DisableTLSALPNChallenge = false
		tmpl.AltTLSALPNPort = ap.Port
		if h := listenHost(ap); host == "" || h == host {
			host = h
		} else {
			host = "" // two different hosts: certmagic has one ListenHost; all interfaces still collide
		}
	}
	if tmpl.DisableHTTPChallenge && tmpl.DisableTLSALPNChallenge {
		return nil, errors.New("acme: no challenge can be answered: HTTP-01 needs the plain listener, TLS-ALPN-01 the TLS one")
	}
	tmpl.ListenHost = host

	var store certmagic.Storage = &certmagic.FileStorage{Path: m.opts.Dir}
	if m.shared != nil {
		store = m.shared
	}
	e := &engine{store: newOwnedStorage(store)}
	e.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return e.cfg, nil },
		RenewCheckInterval: m.opts.RenewCheckInterval,
		Logger:             m.cmLog,
	})
	e.cfg = certmagic.New(e.cache, certmagic.Config{
		RenewalWindowRatio: m.opts.RenewalWindowRatio,
		Storage:            e.store,
		Logger:             m.cmLog,
		OnEvent:            m.onEvent,
		ShouldEmitFunc:     shouldEmit,
		Issuers:            []certmagic.Issuer{}, // not certmagic's default; set below
	})
	e.issuer = certmagic.NewACMEIssuer(e.cfg, tmpl)
	e.cfg.Issuers = []certmagic.Issuer{e.issuer}
	return e, nil
}

func tcpAddr(a net.Addr) (*net.TCPAddr, bool) {
	ta, ok := a.(*net.TCPAddr)
	return ta, ok && ta != nil && ta.Port > 0
}

// listenHost is the host certmagic's solver tries to bind next to the proxy's listener:
// "" for one on every interface.
func listenHost(a *net.TCPAddr) string {
	if a.IP == nil || a.IP.IsUnspecified() {
		return ""
	}
	return a.IP.String()
}

// stop ends every hostname's management and certmagic's maintenance, then the store:
// watching are the goroutines that watch it (Run's context has ended).
func (m *Manager) stop(e *engine, watching *sync.WaitGroup) {
	m.mu.Lock()
	for _, h := range m.hosts {
		h.cancel()
	}
	m.mu.Unlock()
	e.cache.Stop()
	// certmagic's obtain and renew goroutines see their contexts end a moment later:
	// nothing of theirs writes into Options.Dir once Run has returned.
	if !e.store.close(storageCloseWait) {
		m.log.Warn("acme: certificate store writes still under way after stop", zap.Duration("waited", storageCloseWait))
	}
	if !waitFor(&m.managing, storageCloseWait) {
		m.log.Warn("acme: certificate management still under way after stop", zap.Duration("waited", storageCloseWait))
	}
	watching.Wait()
	if m.shared != nil {
		// Locks still held (an order cut short) are released: no replica waits for them
		// to expire.
		if err := m.shared.Close(); err != nil {
			m.log.Warn("acme: closing the certificate store", zap.Error(err))
		}
	}
}

// waitFor waits for wg up to limit and reports whether it ended.
func waitFor(wg *sync.WaitGroup, limit time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// storageCloseWait bounds how long stopping waits for certmagic's writes under way.
const storageCloseWait = 10 * time.Second

// acmeHosts returns the hostnames c's routes want certificates for, and the wildcard ones
// that cannot have one.
func acmeHosts(c *routetable.Compiled) (want map[string]bool, wildcard []string) {
	want = map[string]bool{}
	if c == nil || c.Source == nil {
		return want, nil
	}
	for i := range c.Source.Routes {
		r := &c.Source.Routes[i]
		if r.TLS == nil || !r.TLS.ACME {
			continue
		}
		if strings.HasPrefix(r.Hostname, "*.") {
			wildcard = append(wildcard, r.Hostname)
			continue
		}
		want[r.Hostname] = true
	}
	return want, wildcard
}

// sync makes the managed set the table's: hostnames that left stop being managed (their
// certificate leaves the cache, so it is neither served nor renewed), new ones are
// managed in the background (loaded from storage, or obtained).
func (m *Manager) sync(ctx context.Context, e *engine, c *routetable.Compiled) {
	want, wildcard := acmeHosts(c)
	type start struct {
		ctx context.Context
		h   *host
	}
	var added []start
	var removed []string
	now := time.Now()
	m.mu.Lock()
	for name, h := range m.hosts {
		if !want[name] {
			h.cancel()
			delete(m.hosts, name)
			m.departed[name] = now
			removed = append(removed, name)
		}
	}
	for name := range want {
		if m.hosts[name] == nil {
			hctx, cancel := context.WithCancel(ctx)
			h := &host{name: name, cancel: cancel}
			m.hosts[name] = h
			delete(m.departed, name)
			added = append(added, start{hctx, h})
		}
	}
	names := make(map[string]struct{}, len(m.hosts))
	for name := range m.hosts {
		names[name] = struct{}{}
	}
	m.names.Store(&names)
	for _, w := range wildcard {
		if !slices.Contains(m.wildcard, w) {
			m.log.Warn("acme: a wildcard route gets no certificate: only the DNS-01 challenge proves a wildcard, and the ingress does not answer it",
				zap.String("hostname", w))
		}
	}
	m.wildcard = wildcard
	m.mu.Unlock()

	if len(removed) > 0 {
		e.unmanage(removed)
		for _, name := range removed {
			m.log.Info("acme: hostname left the routes; its certificate is no longer served or renewed", zap.String("hostname", name))
			m.emitLocal(event{Kind: "unmanaged", Hostname: name})
		}
	}
	for _, a := range added {
		m.log.Info("acme: managing the certificate of a route", zap.String("hostname", a.h.name))
		m.emitLocal(event{Kind: "managed", Hostname: a.h.name})
		// A certificate already in storage goes into the cache now, before Started, so
		// that a restart serves it from the first handshake (a disk read, no CA); from
		// then on certmagic's maintenance renews it. One that is not there (or a store
		// that does not answer) is no error here: manage gets it in the background.
		if cert, err := e.cfg.CacheManagedCertificate(a.ctx, a.h.name); err == nil {
			m.loaded(a.h.name, cert)
			continue
		}
		m.managing.Go(func() { m.manage(a.ctx, e, a.h.name) })
	}
}

// Retries of manage when the store fails: storeRetry, doubling up to storeRetryMax, and
// at once when the shared store answers again.
const (
	storeRetry    = time.Second
	storeRetryMax = 30 * time.Second
	// loadLogEvery bounds manage's lines about one hostname's store failures.
	loadLogEvery = time.Minute
)

// manage gets name's certificate into the cache: loaded from the store, or, when the
// store has none, obtained by certmagic (ObtainCertAsync: it takes the store's lock for
// the name, looks again, and only then orders, retried with its backoff; so of the
// replicas sharing a store one orders and the others load what it stored once the lock
// is theirs). A failure of the store itself is retried here, which certmagic's
// ManageAsync would not do. It returns once the certificate is in the cache (certmagic's
// maintenance renews it from then on) or when ctx ends (the hostname left, or Run ended).
func (m *Manager) manage(ctx context.Context, e *engine, name string) {
	wait := storeRetry
	var logged time.Time
	for {
		cert, err := e.cfg.CacheManagedCertificate(ctx, name)
		if err == nil {
			m.loaded(name, cert)
			return
		}
		if errors.Is(err, fs.ErrNotExist) && ctx.Err() == nil {
			if err = e.cfg.ObtainCertAsync(ctx, name); err == nil {
				wait = storeRetry
				continue // obtained here, or by another replica: load it
			}
		}
		if ctx.Err() != nil {
			return
		}
		// A store that does not answer is logged by its health, once; anything else
		// (a stored certificate that does not parse, ...) once a minute per hostname.
		if !isStoreFailure(err) && time.Since(logged) >= loadLogEvery {
			logged = time.Now()
			m.log.Warn("acme: certificate neither loaded from the store nor obtained; retrying",
				zap.String("hostname", name), zap.Duration("retryIn", wait), zap.Error(err))
		}
		var answered <-chan struct{}
		if m.health != nil {
			answered = m.health.answered()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-answered:
			t.Stop()
		}
		wait = min(2*wait, storeRetryMax)
	}
}

// loaded logs a certificate put into the cache from the store (after an order, here or
// by another replica sharing the store, or at start).
func (m *Manager) loaded(name string, cert certmagic.Certificate) {
	fields := []zap.Field{zap.String("hostname", name)}
	if cert.Leaf != nil {
		fields = append(fields, zap.String("serial", cert.Leaf.SerialNumber.Text(16)), zap.Time("notAfter", cert.Leaf.NotAfter))
	}
	m.log.Info("acme: certificate loaded from the store", fields...)
}

// unmanage removes the certificates of names from certmagic's cache: maintenance no
// longer sees them. They stay in storage, so a name that comes back is served at once.
func (e *engine) unmanage(names []string) {
	subjects := make([]certmagic.SubjectIssuer, len(names))
	for i, n := range names {
		subjects[i] = certmagic.SubjectIssuer{Subject: n}
	}
	e.cache.RemoveManaged(subjects)
}

// sweepDeparted removes again the certificates of hostnames that left within
// departedMemory (a renewal under way when they left may have put one back), and forgets
// older departures.
func (m *Manager) sweepDeparted(e *engine) {
	m.mu.Lock()
	var names []string
	now := time.Now()
	for name, at := range m.departed {
		if now.Sub(at) > departedMemory {
			delete(m.departed, name)
			continue
		}
		names = append(names, name)
	}
	m.mu.Unlock()
	if len(names) > 0 {
		e.unmanage(names)
	}
}

// managed reports whether name (normalised) is managed now.
func (m *Manager) managed(name string) bool {
	_, ok := (*m.names.Load())[name]
	return ok
}

// newAccount runs before certmagic registers an account: without Agreed, a CA whose
// directory names terms of service gets no account.
func (m *Manager) newAccount(ctx context.Context, iss *certmagic.ACMEIssuer, acct acmez.Account) (acmez.Account, error) {
	if m.opts.Agreed {
		return acct, nil
	}
	terms, err := m.termsOfService(ctx, iss.CA)
	if err != nil {
		return acct, err
	}
	if terms != "" {
		return acct, fmt.Errorf("%s (%s)", errTermsText, terms)
	}
	return acct, nil
}

// errTermsText marks the terms refusal in errors (certmagic passes the callback's error on
// as text).
const errTermsText = "the CA asks subscribers to agree to its terms of service, and they were not agreed to (--acme-agree)"

// termsOfService fetches the CA's directory and returns meta.termsOfService.
func (m *Manager) termsOfService(ctx context.Context, dir string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, dir, nil)
	if err != nil {
		return "", err
	}
	res, err := m.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("fetching the CA's directory: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("fetching the CA's directory: HTTP %d", res.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("reading the CA's directory: %w", err)
	}
	// The directory is untrusted JSON like any other: one reader (internal/jsonx), a
	// repeated key refused. Its other keys are the CA's business.
	doc, err := jsonx.Parse(body)
	if err != nil {
		return "", fmt.Errorf("reading the CA's directory: %w", err)
	}
	top, ok := doc.Fields()
	if !ok {
		return "", errors.New("reading the CA's directory: not a JSON object")
	}
	meta, _ := top.Get("meta").Fields()
	v, ok := meta.Lookup("termsOfService")
	if !ok || v.IsNull() {
		return "", nil
	}
	terms, ok := v.AsString()
	if !ok {
		return "", errors.New("reading the CA's directory: meta.termsOfService is not a string")
	}
	return terms, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

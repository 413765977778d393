package acme

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/acme/internal/redisstore"
)

// SharedStore is a certificate store in Redis that several replicas share
// (--acme-storage): the certificates, their keys, the ACME account and the tokens of the
// challenges under way live there, so one replica orders a name's certificate (under the
// store's lock), every replica serves it, and any replica answers the CA's validation.
type SharedStore struct {
	// URL is redis://[user[:password]@]host[:port][/db], or rediss:// for TLS.
	URL string
	// Password, when set, is the password (read from a file); the URL then has none.
	Password string
	// Prefix starts every key, so that several clusters share one server.
	Prefix string
	// Roots are trusted for a rediss:// server; nil means the system's roots.
	Roots *x509.CertPool
	// Redact scrubs the password out of text the server or its client chose, before it
	// is logged (at debug level only); nil leaves such text out.
	Redact func(string) string
	// LockTTL and LockPoll change the store's lock timing (tests); zero means
	// redisstore's defaults (10 s, 200 ms).
	LockTTL, LockPoll time.Duration
}

// DefaultStoragePrefix is the key prefix when none is given.
const DefaultStoragePrefix = "ingress"

// CheckStorage judges a shared store's URL and prefix without contacting it; its errors
// never quote the URL (which may hold the password). It returns the URL as logs show it.
func CheckStorage(rawURL, prefix string) (redacted string, err error) {
	ep, uerr := redisstore.ParseURL(rawURL)
	if uerr != nil {
		err = errors.Join(err, fmt.Errorf("the URL %w", uerr))
	}
	if perr := redisstore.CheckPrefix(prefix); perr != nil {
		err = errors.Join(err, fmt.Errorf("the key prefix %w", perr))
	}
	if err != nil {
		return "", err
	}
	return ep.Redacted(), nil
}

// StorageHasPassword reports whether a shared store's URL carries a password.
func StorageHasPassword(rawURL string) bool {
	return StoragePassword(rawURL, "") != ""
}

// StoragePassword is the password a shared store is given: password when set, else the
// URL's ("" for none). Only a scrubber may be built from it.
func StoragePassword(rawURL, password string) string {
	if password != "" {
		return password
	}
	ep, err := redisstore.ParseURL(rawURL)
	if err != nil {
		return ""
	}
	return ep.Password
}

// newShared builds the shared store and its health (no I/O).
func (m *Manager) newShared(o *SharedStore) error {
	h := newStoreHealth(m.log)
	s, err := redisstore.New(redisstore.Options{
		URL:      o.URL,
		Password: o.Password,
		Prefix:   o.Prefix,
		RootCAs:  o.Roots,
		LockTTL:  o.LockTTL,
		LockPoll: o.LockPoll,
		Observe:  h.observe,
		LockLost: func(name string) {
			m.log.Warn("acme: a lock of the certificate store expired while held (the store did not answer its renewals): another replica may do the same work",
				zap.String("lock", name))
		},
	})
	if err != nil {
		return fmt.Errorf("acme: %w", err)
	}
	h.endpoint = s.Endpoint()
	m.shared, m.health = s, h
	redact := o.Redact
	redisstore.SetDriverLog(func(line string) {
		if redact == nil {
			return
		}
		m.log.Debug("acme: the Redis client's own line (scrubbed)", zap.String("text", redact(line)))
	})
	return nil
}

// CheckStore makes sure the certificate store answers: the shared store's server is
// reached and takes the password (a store on disk needs nothing). It is meant for the
// start, where a wrong password or address refuses the configuration.
func (m *Manager) CheckStore(ctx context.Context) error {
	if m.shared == nil {
		return nil
	}
	if err := m.shared.Ping(ctx); err != nil {
		return fmt.Errorf("%s: %w", m.shared.Endpoint(), err)
	}
	return nil
}

// Store health: how often the shared store is asked while nothing else asks it.
const (
	healthEveryUp   = 10 * time.Second
	healthEveryDown = 2 * time.Second
	// downLogEvery bounds the lines saying the store is still unreachable.
	downLogEvery = time.Minute
)

// watchStore pings the shared store until ctx ends, so that its health (/readyz, the
// metrics) is current while certmagic does not need it, and so that the orders waiting
// for it go on as soon as it answers again.
func (m *Manager) watchStore(ctx context.Context) {
	for {
		every := healthEveryUp
		if m.health.isDown() {
			every = healthEveryDown
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		_ = m.shared.Ping(pctx) // the outcome goes to the health through Observe
		cancel()
	}
}

// storeHealth follows the shared store's answers: whether it answers, since when not and
// why. It logs the change once (and, while the store stays unreachable, once a minute),
// counts every failed round trip, and wakes the orders waiting for the store when it
// answers again.
type storeHealth struct {
	log      *zap.Logger
	endpoint string
	failures atomic.Uint64
	// active is set by Run: before it, the store's answers are CheckStore's, whose
	// caller reports them.
	active atomic.Bool

	mu       sync.Mutex
	down     bool
	since    time.Time
	cause    string
	lastLine time.Time
	missed   uint64        // failures since the last line
	back     chan struct{} // closed when the store answers again
}

func newStoreHealth(log *zap.Logger) *storeHealth {
	return &storeHealth{log: log, back: make(chan struct{})}
}

// observe is redisstore's Observe: nil for an answer, else the failure.
func (h *storeHealth) observe(err error) {
	if !h.active.Load() {
		return
	}
	now := time.Now()
	if err == nil {
		h.mu.Lock()
		if !h.down {
			h.mu.Unlock()
			return
		}
		h.down = false
		since, missed := h.since, h.missed
		close(h.back)
		h.back = make(chan struct{})
		h.mu.Unlock()
		h.log.Info("acme: the certificate store answers again; orders and renewals go on",
			zap.String("store", h.endpoint), zap.Duration("unreachableFor", now.Sub(since).Round(time.Millisecond)),
			zap.Uint64("failedOperations", missed))
		return
	}
	h.failures.Add(1)
	h.mu.Lock()
	h.missed++
	switch {
	case !h.down:
		h.down, h.since, h.cause, h.lastLine, h.missed = true, now, err.Error(), now, 1
		h.mu.Unlock()
		h.log.Error("acme: the certificate store does not answer; the certificates held are served, orders and renewals wait for it",
			zap.String("store", h.endpoint), zap.Error(err))
	case now.Sub(h.lastLine) >= downLogEvery:
		h.cause, h.lastLine = err.Error(), now
		since, missed := h.since, h.missed
		h.mu.Unlock()
		h.log.Warn("acme: the certificate store still does not answer",
			zap.String("store", h.endpoint), zap.Duration("since", now.Sub(since).Round(time.Second)),
			zap.Uint64("failedOperations", missed), zap.Error(err))
	default:
		h.cause = err.Error()
		h.mu.Unlock()
	}
}

func (h *storeHealth) isDown() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down
}

// state returns whether the store is unreachable, since when and why.
func (h *storeHealth) state() (down bool, since time.Time, cause string, missed uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down, h.since, h.cause, h.missed
}

// answered is closed when the store next answers after a failure.
func (h *storeHealth) answered() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.back
}

// isStoreFailure reports a failed round trip to the shared store (its health logs it).
func isStoreFailure(err error) bool {
	var e *redisstore.Error
	return errors.As(err, &e)
}

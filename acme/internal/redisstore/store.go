// Package redisstore is certmagic's Storage, Locker and TryLocker on one Redis server, so
// that several ingress replicas share their certificates, their ACME account and the
// tokens of the challenges under way (--acme-storage). It is a mechanism: it knows
// certmagic's storage contract and the layout of a certificate resource, nothing of
// routes or of the ingress.
//
// Keys: certmagic's key K is a hash at PREFIX:file:K (the value in field v, the time it
// was written, Unix milliseconds, in t), a lock NAME a string at PREFIX:lock:NAME.
// Directories are implicit, as in certmagic's FileStorage: List, Exists and Stat of a
// directory SCAN for the keys under it.
//
// Locks: SET NX with a random token and a TTL (LockTTL), renewed every LockRenew by a
// goroutine of the Store while held, and released by a Lua compare-and-delete of the
// token, so that only their owner releases them. A holder that dies stops renewing and
// its lock expires LockTTL later at most. Close releases the locks still held.
//
// A certificate resource, which certmagic writes as three Store calls (its .key, .crt
// and .json, storeTx in that order) and reads as three Loads in the same order, is
// written and read as one. Writing, the .key and .crt wait in memory until the .json
// comes, and the three go in one MULTI/EXEC: a replica that dies between the calls, or a
// write that fails, leaves the resource as it was, and a Delete that undoes the first two
// after the third failed (storeTx's rollback) only forgets what waited. Reading, the
// .key's Load reads the three in one MULTI/EXEC and the .crt's and .json's Loads that
// follow within 250 ms are answered from what it read (unless a lock was taken since).
// So no replica loads a certificate with another one's key, even while a renewal writes.
//
// Every round trip's outcome goes to Options.Observe (health), and every error is an
// *Error whose text never quotes the server.
package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap/zapcore"
)

// Defaults of the lock timing (Options): a holder that dies blocks the others for at
// most DefaultLockTTL; a live one renews three times per TTL, so two renewals in a row
// may fail (a slow server, a pause) before its lock can expire.
const (
	DefaultLockTTL  = 10 * time.Second
	DefaultLockPoll = 200 * time.Millisecond
)

// opTimeout bounds one round trip when the caller's context has no deadline.
const opTimeout = 5 * time.Second

// stagedMaxAge is how long a resource's .key and .crt wait for its .json before they are
// forgotten (certmagic writes the three within milliseconds).
const stagedMaxAge = 5 * time.Minute

// Options configure a Store.
type Options struct {
	// URL is redis://[user[:password]@]host[:port][/db] or rediss://… (TLS). Required.
	URL string
	// Password, when set, is the password (read from a file); the URL then has none.
	Password string
	// Prefix starts every key (CheckPrefix); several clusters share a server under
	// different prefixes. Required.
	Prefix string
	// RootCAs are trusted for a rediss:// server; nil means the system's roots.
	RootCAs *x509.CertPool

	// LockTTL is how long a lock outlives its holder's last renewal; LockRenew how often
	// a held lock is renewed (LockTTL/3 by default); LockPoll how often Lock tries again
	// while another holds it (jittered ±25%).
	LockTTL, LockRenew, LockPoll time.Duration

	// Observe, when set, sees the outcome of every round trip to the server: nil for an
	// answer (a key not found included), else the *Error. A caller's cancelled context
	// is no outcome. It must not block.
	Observe func(err error)
	// LockLost, when set, is told of a held lock found expired (and perhaps taken by
	// another) at a renewal: its holder's work is no longer exclusive.
	LockLost func(name string)
}

// Store is certmagic's Storage, Locker and TryLocker on Redis. Create it with New; Close
// it once. Its methods are safe for concurrent use.
type Store struct {
	rdb      *redis.Client
	endpoint Endpoint
	prefix   string
	ttl      time.Duration
	renew    time.Duration
	poll     time.Duration
	observe  func(error)
	lockLost func(string)

	ctx    context.Context // ends the renewals at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the renewals

	mu     sync.Mutex
	closed bool
	held   map[string]*heldLock
	staged map[string]*staged   // by resource (the key without its extension)
	snaps  map[string]*snapshot // by resource: read as one (readResource)
	epoch  uint64               // locks taken so far: snapshots older than the last are void
}

// heldLock is a lock this Store holds and renews.
type heldLock struct {
	token  string
	cancel context.CancelFunc
	done   chan struct{} // closed when its renewal goroutine ended
}

// staged is the part of a certificate resource written before its .json.
type staged struct {
	files map[string][]byte
	at    time.Time
}

var (
	_ certmagic.Storage   = (*Store)(nil)
	_ certmagic.TryLocker = (*Store)(nil)
)

// New checks o and builds a Store; it contacts nothing (Ping does).
func New(o Options) (*Store, error) {
	ep, err := ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("redisstore: the URL %w", err)
	}
	if o.Password != "" {
		if ep.Password != "" {
			return nil, errors.New("redisstore: the URL has a password and another was given")
		}
		ep.Password = o.Password
	}
	if err := CheckPrefix(o.Prefix); err != nil {
		return nil, fmt.Errorf("redisstore: the key prefix %w", err)
	}
	if o.LockTTL <= 0 {
		o.LockTTL = DefaultLockTTL
	}
	if o.LockRenew <= 0 || o.LockRenew >= o.LockTTL {
		o.LockRenew = o.LockTTL / 3
	}
	if o.LockPoll <= 0 {
		o.LockPoll = DefaultLockPoll
	}
	ro := &redis.Options{
		Addr:                     ep.Addr(),
		Username:                 ep.Username,
		Password:                 ep.Password,
		DB:                       ep.DB,
		Protocol:                 2, // AUTH, plain replies: nothing of RESP3's pushes is used
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		DialTimeout:              2 * time.Second,
		DialerRetries:            1,
		ReadTimeout:              3 * time.Second,
		WriteTimeout:             3 * time.Second,
		ContextTimeoutEnabled:    true,
		MaxRetries:               -1, // callers retry; a lock's SET NX must not be sent twice
		PoolSize:                 8,
		PoolTimeout:              4 * time.Second,
	}
	if ep.TLS {
		ro.TLSConfig = &tls.Config{ServerName: ep.Host, RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12}
	}
	s := &Store{
		rdb:      redis.NewClient(ro),
		endpoint: ep,
		prefix:   o.Prefix,
		ttl:      o.LockTTL,
		renew:    o.LockRenew,
		poll:     o.LockPoll,
		observe:  o.Observe,
		lockLost: o.LockLost,
		held:     map[string]*heldLock{},
		staged:   map[string]*staged{},
		snaps:    map[string]*snapshot{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// String names the store without the password (certmagic logs its storage).
func (s *Store) String() string {
	return "redis store " + s.endpoint.Redacted() + " (prefix " + s.prefix + ")"
}

// GoString, MarshalJSON and MarshalLogObject print what String does: no reflection over
// the Store reaches the password.
func (s *Store) GoString() string             { return s.String() }
func (s *Store) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(s.String())), nil }
func (s *Store) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("redis", s.endpoint.Redacted())
	enc.AddString("prefix", s.prefix)
	return nil
}

// Endpoint is the server's URL, redacted.
func (s *Store) Endpoint() string { return s.endpoint.Redacted() }

// LockTTL is the lock expiry in force.
func (s *Store) LockTTL() time.Duration { return s.ttl }

func (s *Store) fileKey(k string) string { return s.prefix + ":file:" + k }
func (s *Store) lockKey(n string) string { return s.prefix + ":lock:" + n }

// bounded gives a round trip a deadline (opTimeout) when ctx has none.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, opTimeout, errOpTimeout)
}

// errOpTimeout is the cause of the deadlines the store sets itself: a round trip that
// meets one failed for want of an answer, where one that meets the caller's own deadline
// or cancellation says nothing of the server.
var errOpTimeout = errors.New("redisstore: no answer in time")

// result reports a round trip's outcome, made under ctx, to Observe and returns its error
// as an *Error (redis.Nil, a key not found, is an answer and is returned as it is). When
// the caller's context ended, the error is the context's and is no outcome.
func (s *Store) result(ctx context.Context, op string, err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		if s.observe != nil {
			s.observe(nil)
		}
		return err
	}
	var ne net.Error
	if dl, ok := ctx.Deadline(); ok && errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
		// go-redis gives the socket the context's deadline: its timeout may come a
		// moment before the context's own timer says the context ended.
		t := time.NewTimer(time.Until(dl) + 10*time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if ctx.Err() != nil && !errors.Is(context.Cause(ctx), errOpTimeout) {
		return fmt.Errorf("redis %s: %w", op, ctx.Err())
	}
	err = describe(op, err)
	var e *Error
	if errors.As(err, &e) && s.observe != nil {
		s.observe(e)
	}
	return err
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Ping asks the server for an answer (after the client authenticated).
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	return s.result(ctx, "ping", s.rdb.Ping(ctx).Err())
}

// Store writes value at key; a certificate resource's .key and .crt wait for its .json
// (see the package comment).
func (s *Store) Store(ctx context.Context, key string, value []byte) error {
	if s.isClosed() {
		return describe("store", ErrClosed)
	}
	if res, ext, ok := resourceOf(key); ok {
		if ext != ".json" {
			s.stage(res, key, value)
			return nil
		}
		return s.commit(ctx, res, key, value)
	}
	return s.write(ctx, map[string][]byte{key: value})
}

// write sets files in one MULTI/EXEC.
func (s *Store) write(ctx context.Context, files map[string][]byte) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	now := time.Now().UnixMilli()
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for k, v := range files {
			p.HSet(ctx, s.fileKey(k), "v", v, "t", now)
		}
		return nil
	})
	return s.result(ctx, "store", err)
}

func (s *Store) stage(res, key string, value []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for r, st := range s.staged {
		if now.Sub(st.at) > stagedMaxAge {
			delete(s.staged, r)
		}
	}
	st := s.staged[res]
	if st == nil {
		st = &staged{files: map[string][]byte{}}
		s.staged[res] = st
	}
	st.files[key] = slices.Clone(value)
	st.at = now
}

// commit writes a resource's .json with what of it waited, as one; what waited is kept
// when the write fails, for the rollback's Delete to forget.
func (s *Store) commit(ctx context.Context, res, key string, value []byte) error {
	s.mu.Lock()
	st := s.staged[res]
	files := map[string][]byte{key: value}
	if st != nil {
		for k, v := range st.files {
			files[k] = v
		}
	}
	s.mu.Unlock()
	if err := s.write(ctx, files); err != nil {
		return err
	}
	s.mu.Lock()
	if s.staged[res] == st {
		delete(s.staged, res)
	}
	delete(s.snaps, res) // this process reads what it wrote
	s.mu.Unlock()
	return nil
}

// unstage forgets key if it waits for its resource's .json, and reports whether it did.
func (s *Store) unstage(key string) bool {
	res, _, ok := resourceOf(key)
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.staged[res]
	if st == nil {
		return false
	}
	if _, ok := st.files[key]; !ok {
		return false
	}
	delete(st.files, key)
	if len(st.files) == 0 {
		delete(s.staged, res)
	}
	return true
}

// resourceOf returns the certificate resource key belongs to (certmagic's layout:
// certificates/ISSUER/NAME/NAME.key, .crt and .json) and key's extension.
func resourceOf(key string) (res, ext string, ok bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 4 || parts[0] != "certificates" || parts[1] == "" || parts[2] == "" {
		return "", "", false
	}
	for _, x := range []string{".key", ".crt", ".json"} {
		if parts[3] == parts[2]+x {
			return strings.TrimSuffix(key, x), x, true
		}
	}
	return "", "", false
}

// Load returns the value at key, or an error satisfying errors.Is(err, fs.ErrNotExist).
// A certificate resource is read as one: see readResource.
func (s *Store) Load(ctx context.Context, key string) ([]byte, error) {
	if res, ext, ok := resourceOf(key); ok {
		if v, found, ok := s.fromSnapshot(res, key); ok {
			if !found {
				return nil, &fs.PathError{Op: "load", Path: key, Err: fs.ErrNotExist}
			}
			return slices.Clone(v), nil
		}
		if ext == ".key" {
			return s.readResource(ctx, res, key)
		}
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	v, err := s.rdb.HGet(ctx, s.fileKey(key), "v").Bytes()
	if err = s.result(ctx, "load", err); err != nil {
		if errors.Is(err, redis.Nil) {
			return nil, &fs.PathError{Op: "load", Path: key, Err: fs.ErrNotExist}
		}
		return nil, err
	}
	return v, nil
}

// snapshotFresh is how long a resource read as one answers the reads of its files that
// follow (certmagic reads the .key, then the .crt and the .json, microseconds apart).
const snapshotFresh = 250 * time.Millisecond

// snapshot is a certificate resource read as one: its files' values (nil: missing), when
// the read started, and the lock epoch then.
type snapshot struct {
	files map[string][]byte
	at    time.Time
	epoch uint64
}

// readResource serves the read of a resource's .key, which certmagic makes first: the
// three files are read in one MULTI/EXEC and kept for snapshotFresh, and the reads of
// the .crt and .json in that time are answered from them. A reader that races a
// renewal's write thus gets the old three or the new three, never a key and a
// certificate that do not belong together.
func (s *Store) readResource(ctx context.Context, res, key string) ([]byte, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	s.mu.Lock()
	snap := &snapshot{files: map[string][]byte{}, at: time.Now(), epoch: s.epoch}
	s.mu.Unlock()
	names := []string{res + ".key", res + ".crt", res + ".json"}
	cmds := make([]*redis.StringCmd, len(names))
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range names {
			cmds[i] = p.HGet(ctx, s.fileKey(n), "v")
		}
		return nil
	})
	if err = s.result(ctx, "load", err); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	for i, n := range names {
		if v, err := cmds[i].Bytes(); err == nil {
			snap.files[n] = v
		}
	}
	v, found := snap.files[key]
	if !found {
		return nil, &fs.PathError{Op: "load", Path: key, Err: fs.ErrNotExist}
	}
	s.mu.Lock()
	for r, sn := range s.snaps {
		if time.Since(sn.at) > snapshotFresh {
			delete(s.snaps, r)
		}
	}
	s.snaps[res] = snap
	s.mu.Unlock()
	return slices.Clone(v), nil
}

// fromSnapshot answers key from its resource's fresh snapshot, if there is one. A fresh
// snapshot also answers a .key read (it is not read again), so that readers racing each
// other all get the same three. A snapshot read before this Store last took a lock
// answers nothing: what certmagic reads under a lock (to decide whether an order is still
// needed) must be what the lock's previous holder left.
func (s *Store) fromSnapshot(res, key string) (v []byte, found, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn := s.snaps[res]
	if sn == nil || time.Since(sn.at) > snapshotFresh || sn.epoch != s.epoch {
		return nil, false, false
	}
	v, found = sn.files[key]
	return v, found, true
}

// Delete removes key and every key under it (a directory); a missing key is no error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if s.unstage(key) {
		return nil
	}
	if s.isClosed() {
		return describe("delete", ErrClosed)
	}
	if res, _, ok := resourceOf(key); ok {
		s.mu.Lock()
		delete(s.snaps, res)
		s.mu.Unlock()
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	if err := s.result(ctx, "delete", s.rdb.Del(ctx, s.fileKey(key)).Err()); err != nil {
		return err
	}
	under, err := s.scan(ctx, key, 0)
	if err != nil {
		return err
	}
	for batch := range slices.Chunk(under, 256) {
		keys := make([]string, len(batch))
		for i, k := range batch {
			keys[i] = s.fileKey(k)
		}
		if err := s.result(ctx, "delete", s.rdb.Del(ctx, keys...).Err()); err != nil {
			return err
		}
	}
	return nil
}

// Exists reports whether key is a file or a directory. An error says yes: certmagic asks
// Exists to decide whether to place an order, and an order placed because the server
// did not answer is the duplicate a shared store is there to prevent; the Load that
// follows fails and is retried.
func (s *Store) Exists(ctx context.Context, key string) bool {
	ctx, cancel := bounded(ctx)
	defer cancel()
	n, err := s.rdb.Exists(ctx, s.fileKey(key)).Result()
	if s.result(ctx, "exists", err) != nil {
		return true
	}
	if n > 0 {
		return true
	}
	under, err := s.scan(ctx, key, 1)
	return err != nil || len(under) > 0
}

// List returns the keys under dir: its direct children (files and directories), or with
// recursive every key and directory below it.
func (s *Store) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	under, err := s.scan(ctx, dir, 0)
	if err != nil {
		return nil, err
	}
	if len(under) == 0 {
		return nil, &fs.PathError{Op: "list", Path: dir, Err: fs.ErrNotExist}
	}
	base := strings.TrimSuffix(dir, "/")
	seen := map[string]bool{}
	for _, k := range under {
		rel := k
		if base != "" {
			rel = strings.TrimPrefix(k, base+"/")
		}
		parts := strings.Split(rel, "/")
		n := 1
		if recursive {
			n = len(parts)
		}
		for i := 1; i <= n; i++ {
			seen[path.Join(base, strings.Join(parts[:i], "/"))] = true
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out, nil
}

// Stat describes key, a file or a directory.
func (s *Store) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	var t *redis.StringCmd
	var size *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		t = p.HGet(ctx, s.fileKey(key), "t")
		size = p.HStrLen(ctx, s.fileKey(key), "v")
		return nil
	})
	if err = s.result(ctx, "stat", err); err != nil && !errors.Is(err, redis.Nil) {
		return certmagic.KeyInfo{}, err
	}
	if ms, err := t.Int64(); err == nil {
		return certmagic.KeyInfo{Key: key, Modified: time.UnixMilli(ms), Size: size.Val(), IsTerminal: true}, nil
	}
	under, err := s.scan(ctx, key, 1)
	if err != nil {
		return certmagic.KeyInfo{}, err
	}
	if len(under) == 0 {
		return certmagic.KeyInfo{}, &fs.PathError{Op: "stat", Path: key, Err: fs.ErrNotExist}
	}
	return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
}

// scan returns the keys under dir ("" for all), at most limit of them (0: all).
func (s *Store) scan(ctx context.Context, dir string, limit int) ([]string, error) {
	pattern := globEscape(s.fileKey("")) + "*"
	if d := strings.TrimSuffix(dir, "/"); d != "" {
		pattern = globEscape(s.fileKey(d)) + "/*"
	}
	base := s.fileKey("")
	var out []string
	it := s.rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for it.Next(ctx) {
		out = append(out, strings.TrimPrefix(it.Val(), base))
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	if err := s.result(ctx, "scan", it.Err()); err != nil {
		return nil, err
	}
	return out, nil
}

// globEscape escapes the characters SCAN's MATCH treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// The locks' scripts: only the token's holder renews or releases.
var (
	renewScript  = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) else return 0 end`)
	unlockScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)
)

// Lock takes the lock name, waiting while another holds it, until ctx ends. A server
// error ends the wait with the error.
func (s *Store) Lock(ctx context.Context, name string) error {
	for {
		ok, err := s.TryLock(ctx, name)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		wait := time.Duration(float64(s.poll) * (0.75 + 0.5*mrand.Float64()))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// TryLock takes the lock name if no one holds it.
func (s *Store) TryLock(ctx context.Context, name string) (bool, error) {
	if s.isClosed() {
		return false, describe("lock", ErrClosed)
	}
	token := newToken()
	rctx, cancel := bounded(ctx)
	ok, err := s.rdb.SetNX(rctx, s.lockKey(name), token, s.ttl).Result()
	err = s.result(rctx, "lock", err)
	cancel()
	if err != nil {
		return false, err
	}
	if !ok {
		return false, nil
	}
	s.hold(name, token)
	return true, nil
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// hold records a lock taken and starts its renewal.
func (s *Store) hold(name, token string) {
	ctx, cancel := context.WithCancel(s.ctx)
	h := &heldLock{token: token, cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	if prev := s.held[name]; prev != nil {
		prev.cancel() // it had expired (or Lock would not have succeeded): its renewal ends
	}
	s.held[name] = h
	s.epoch++
	s.mu.Unlock()
	s.wg.Go(func() {
		defer close(h.done)
		s.keepAlive(ctx, name, token)
	})
}

// keepAlive renews the lock every s.renew until ctx ends or the lock is found lost.
func (s *Store) keepAlive(ctx context.Context, name, token string) {
	t := time.NewTicker(s.renew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeoutCause(ctx, s.renew, errOpTimeout)
		n, err := renewScript.Run(rctx, s.rdb, []string{s.lockKey(name)}, token, s.ttl.Milliseconds()).Int()
		err = s.result(rctx, "renew lock", err)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			continue // tried again at the next tick; the TTL covers two misses
		}
		if n == 0 {
			if s.lockLost != nil {
				s.lockLost(name)
			}
			return
		}
	}
}

// ErrLockLost is returned by Unlock for a lock that had expired before it was released:
// someone else may have held it meanwhile.
var ErrLockLost = errors.New("redisstore: the lock had expired before it was released")

// Unlock releases the lock name if this Store still holds it.
func (s *Store) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("redisstore: unlock %q: this process does not hold it", name)
	}
	h.cancel()
	<-h.done
	return s.release(ctx, name, h.token)
}

func (s *Store) release(ctx context.Context, name, token string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	n, err := unlockScript.Run(ctx, s.rdb, []string{s.lockKey(name)}, token).Int()
	if err = s.result(ctx, "unlock", err); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: %q", ErrLockLost, name)
	}
	return nil
}

// Close ends the renewals, releases the locks still held (so that no one waits for them
// to expire) and closes the connections. Later calls fail with ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	held := s.held
	s.held = map[string]*heldLock{}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	for name, h := range held {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.release(ctx, name, h.token)
		cancel()
	}
	return s.rdb.Close()
}

package routetable

import (
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/stats"
)

// refusedMemory is how many refused revisions the store remembers. Older ones are
// forgotten: a table with such a revision would be judged (and reported) again.
const refusedMemory = 64

// StoreOptions configure a Store. The zero value is usable: no statistics counters, no
// last-known-good file, no logging, relay mode.
type StoreOptions struct {
	// Stats provides each compiled route's counters; nil means routes carry none.
	Stats *stats.Registry
	// StateDir, when not empty, is where every applied table is written (routetable.json,
	// mode 0600) and where LoadState reads it back at start.
	StateDir string
	// Logger receives refusals, warnings and persistence failures; nil means zap.NewNop().
	Logger *zap.Logger
	// Mode is the TLS shapes tables may use: ModeStandalone for a --routes file.
	Mode Mode
	// Now is the clock that judges certificate validity; nil means time.Now.
	Now func() time.Time
	// Redact, if set, is applied to every violation and warning before the store logs or
	// returns it: they may quote what the table's sender chose (an unexpected key), and a
	// relay may echo the registration bearer there. The ingress passes the bearer's
	// scrubber (env.Bearer.Scrubber); nil leaves them as they are.
	Redact func(string) string
	// Check, if set, judges a table that passed every rule of the contract against what
	// this ingress can serve (an ACME route needs a state directory, say); what it returns
	// are violations like any other: the table is refused whole.
	Check func(*Table) []string
}

// Store holds the current compiled table. Load is the only call on the request path: one
// atomic load, no lock, never blocked by an Apply. Apply validates, compiles, swaps in and
// persists a table whole; concurrent Apply calls are serialised. Applied, Refused,
// WantsRevision and the metrics read atomics and are safe at any time.
type Store struct {
	cur atomic.Pointer[Compiled]

	reg      *stats.Registry
	stateDir string
	log      *zap.Logger
	mode     Mode
	now      func() time.Time
	redact   func(string) string
	check    func(*Table) []string

	applied         atomic.Int64 // revision serving, -1 for none
	routes          atomic.Int64
	expired         atomic.Int64
	applies         atomic.Uint64
	refusals        atomic.Uint64
	persistFailures atomic.Uint64
	maxRefused      atomic.Int64            // highest refused revision, -1 for none
	refused         atomic.Pointer[[]int64] // the last refusedMemory refused revisions

	mu       sync.Mutex // serialises apply; guards keyPairs
	keyPairs keyPairs   // the served table's parsed certificates, by PEM
}

// NewStore returns an empty store: Load returns nil until a table is applied.
func NewStore(opts StoreOptions) *Store {
	s := &Store{
		reg:      opts.Stats,
		stateDir: opts.StateDir,
		log:      opts.Logger,
		mode:     opts.Mode,
		now:      opts.Now,
		redact:   opts.Redact,
		check:    opts.Check,
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.redact == nil {
		s.redact = func(v string) string { return v }
	}
	s.applied.Store(-1)
	s.maxRefused.Store(-1)
	s.refused.Store(new([]int64))
	return s
}

// Load returns the current compiled table, or nil when none was applied yet.
func (s *Store) Load() *Compiled { return s.cur.Load() }

// Mode returns the mode the store validates tables in.
func (s *Store) Mode() Mode { return s.mode }

// Applied returns the revision being served; ok is false before the first apply.
func (s *Store) Applied() (rev int64, ok bool) {
	rev = s.applied.Load()
	return rev, rev >= 0
}

// Refused reports whether rev is one of the last 64 revisions refused as invalid.
func (s *Store) Refused(rev int64) bool {
	return slices.Contains(*s.refused.Load(), rev)
}

// WantsRevision reports whether a hint naming rev is worth a pull (contract §5): rev is
// newer than the applied revision and than every revision refused so far (the relay serves
// its newest table, so a pull for an older hint would fetch the refused one again).
func (s *Store) WantsRevision(rev int64) bool {
	return rev > s.applied.Load() && rev > s.maxRefused.Load()
}

// Apply validates t in the store's mode, compiles it and swaps it in whole. It returns an
// *Error: ErrStale when t's revision is not newer than the applied one, ErrAlreadyRefused
// (without logging or counting again) for a revision refused before, ErrInvalid with
// every violation for a table that breaks a rule, which is then logged once, counted and
// remembered as refused. A refusal never disturbs the table being served. t must not be
// modified after the call: the compiled table keeps it as its Source.
func (s *Store) Apply(t *Table) error { return s.apply(t, false, false) }

// ApplyStandalone is Apply for a --routes file (contract §7): when contentChanged is true
// the file is the truth, so the table is applied whatever its revision (newer, equal or
// older) and even if that revision was refused before; when false it behaves as Apply.
func (s *Store) ApplyStandalone(t *Table, contentChanged bool) error {
	return s.apply(t, contentChanged, false)
}

// ApplyJSON decodes one table (the non-null value of the relay's `table`) in the store's
// mode and applies it. A table that fails the schema is refused like one that fails a
// rule: logged, counted and, when its revision decoded, remembered as refused.
func (s *Store) ApplyJSON(raw json.RawMessage) error {
	t, err := Decode(raw, s.mode)
	if err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		ie := s.redacted(err.(*Error))
		if ie.Revision >= 0 {
			if cur := s.applied.Load(); ie.Revision <= cur {
				return &Error{Code: CodeStale, Revision: ie.Revision}
			}
			if s.Refused(ie.Revision) {
				return &Error{Code: CodeAlreadyRefused, Revision: ie.Revision}
			}
		}
		s.refuseLocked(ie)
		return err
	}
	return s.Apply(t)
}

// refuse logs, counts and remembers a table that failed to decode.
func (s *Store) refuse(err *Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuseLocked(s.redacted(err))
}

// redacted passes e's violations through Redact, in place (e was just made by Decode or
// newInvalid), and returns e.
func (s *Store) redacted(e *Error) *Error {
	e.Violations = s.redactAll(e.Violations)
	return e
}

// redactAll returns list with each string passed through Redact, in place.
func (s *Store) redactAll(list []string) []string {
	for i, v := range list {
		list[i] = s.redact(v)
	}
	return list
}

// apply is Apply's body. force skips the revision checks (standalone content change);
// fromState marks the last-known-good file, which is neither refused nor written back.
func (s *Store) apply(t *Table, force, fromState bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t == nil {
		err := newInvalid(-1, []string{"the route table is missing"})
		s.refuseLocked(err)
		return err
	}
	if err := s.revisionCheckLocked(t, force); err != nil {
		return err
	}
	return s.applyLocked(t, validate(t, s.mode, s.now(), s.keyPairs), fromState)
}

// revisionCheckLocked refuses, unless force, a revision not newer than the applied one
// or refused before. s.mu must be held.
func (s *Store) revisionCheckLocked(t *Table, force bool) error {
	if force {
		return nil
	}
	if cur := s.applied.Load(); cur >= 0 && t.Revision <= cur {
		return &Error{Code: CodeStale, Revision: t.Revision}
	}
	if s.Refused(t.Revision) {
		return &Error{Code: CodeAlreadyRefused, Revision: t.Revision}
	}
	return nil
}

// applyValidated is apply for a table that validate has judged (in the store's mode)
// and found without violations (PrepareFile).
func (s *Store) applyValidated(t *Table, v *validated, force, fromState bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.revisionCheckLocked(t, force); err != nil {
		return err
	}
	return s.applyLocked(t, v, fromState)
}

// applyLocked runs the store's Check, then compiles and swaps in a validated table (or
// refuses it for v's violations). s.mu must be held.
func (s *Store) applyLocked(t *Table, v *validated, fromState bool) error {
	if len(v.violations) == 0 && s.check != nil {
		v.violations = s.check(t)
	}
	if len(v.violations) > 0 {
		err := s.redacted(newInvalid(revisionOf(t), v.violations))
		if !fromState {
			s.refuseLocked(err)
		}
		return err
	}
	if s.mode == ModeStandalone {
		sortStandalone(t) // a person's file may come in any order (standalone.go)
	}
	c := compile(t, v.certs, s.cur.Load(), s.reg)
	c.Warnings = s.redactAll(v.warnings)
	c.ExpiredCertificates = v.expired
	s.keyPairs = v.byPEM
	s.cur.Store(c)
	s.applied.Store(t.Revision)
	s.routes.Store(int64(len(t.Routes)))
	s.expired.Store(int64(v.expired))
	s.applies.Add(1)
	s.log.Info("route table applied",
		zap.Int64("revision", t.Revision),
		zap.Int("routes", len(t.Routes)),
		zap.Int("certificates", len(t.Certificates)))
	for _, w := range c.Warnings {
		s.log.Warn("route table warning", zap.Int64("revision", t.Revision), zap.String("warning", w))
	}
	if !fromState && s.stateDir != "" {
		if err := writeState(s.stateDir, t); err != nil {
			s.persistFailures.Add(1)
			s.log.Error("route table not persisted", zap.Int64("revision", t.Revision), zap.Error(err))
		}
	}
	return nil
}

// refuseLocked logs every violation of err once, counts the refusal and remembers its
// revision. s.mu must be held.
func (s *Store) refuseLocked(err *Error) {
	s.refusals.Add(1)
	s.log.Error("route table refused",
		revisionField(err.Revision),
		zap.Int("violations", len(err.Violations)))
	for _, v := range err.Violations {
		s.log.Warn("route table violation", revisionField(err.Revision), zap.String("violation", v))
	}
	if err.Revision < 0 {
		return
	}
	old := *s.refused.Load()
	next := make([]int64, 0, refusedMemory)
	if len(old) >= refusedMemory {
		old = old[len(old)-refusedMemory+1:]
	}
	next = append(append(next, old...), err.Revision)
	s.refused.Store(&next)
	if err.Revision > s.maxRefused.Load() {
		s.maxRefused.Store(err.Revision)
	}
}

// revisionField logs a table's revision, or nothing when it is unknown (a text that is not
// JSON, a revision that did not decode).
func revisionField(rev int64) zap.Field {
	if rev < 0 {
		return zap.Skip()
	}
	return zap.Int64("revision", rev)
}

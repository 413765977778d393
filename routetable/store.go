package routetable

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/serve-zone/ingress/stats"
)

// ErrStale is returned by Apply for a table whose revision is not newer than the applied one.
var ErrStale = errors.New("route table revision is not newer than the applied one")

// Store holds the current compiled table. Load is the only call on the request path: one
// atomic load, no lock. Apply compiles a validated table and swaps it in whole; concurrent
// Apply calls are serialised.
type Store struct {
	cur atomic.Pointer[Compiled]

	reg *stats.Registry

	mu     sync.Mutex
	states map[string]*TargetState
}

// NewStore returns an empty store (Load returns nil until a table is applied). reg may be
// nil, in which case compiled routes carry no statistics counters.
func NewStore(reg *stats.Registry) *Store {
	return &Store{reg: reg, states: map[string]*TargetState{}}
}

// Load returns the current compiled table, or nil when none was applied yet.
func (s *Store) Load() *Compiled { return s.cur.Load() }

// Apply validates, compiles and swaps in t. A table whose revision is not newer than the
// applied one returns ErrStale; an invalid table returns the joined violations and leaves
// the current table serving.
func (s *Store) Apply(t *Table) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.cur.Load(); cur != nil && t.Revision <= cur.Revision {
		return ErrStale
	}
	c, states, err := compile(t, s.states, s.reg)
	if err != nil {
		return err
	}
	s.states = states
	s.cur.Store(c)
	return nil
}

//go:build !linux

package park

import (
	"errors"
	"time"
)

// CanPark is Linux-only; elsewhere idle connections keep their goroutine and buffer.
const CanPark = false

// Parker is never made here (NewParker fails), so nothing is ever parked and its methods
// find nothing.
type Parker struct{}

// NewParker fails here.
func NewParker(Config) (*Parker, error) { return nil, errors.New("park: cannot park here") }

func (*Parker) Run()                              {}
func (*Parker) Stop()                             {}
func (*Parker) Park(Parkee, time.Time) bool       { return false }
func (*Parker) Claim(*Life, State) (Parkee, bool) { return nil, false }
func (*Parker) ClaimAll(State, State) []Parkee    { return nil }
func (*Parker) NoteHandshake()                    {}
func (*Parker) Len() int                          { return 0 }
func (*Parker) Count(State) int                   { return 0 }

package stats

import (
	"errors"
	"strings"
)

// ErrInvalidQuery is matched (errors.Is) by every *QueryError: the session answers it
// with the contract's request-invalid refusal, carrying QueryError.Violations as errors.
var ErrInvalidQuery = errors.New("traffic statistics query invalid")

// ErrSnapshotCorrupt is matched by the error Load returns for a snapshot file that
// cannot be read as one; the file is then ignored (and overwritten by the next Flush).
var ErrSnapshotCorrupt = errors.New("statistics snapshot corrupt")

// ErrNotLoaded is returned by Flush before Load was called: writing then would replace
// the saved statistics with an empty registry.
var ErrNotLoaded = errors.New("statistics snapshot not loaded yet; call Load before Flush")

// QueryError is a refused query. Violations name every problem, each starting with the
// request's key ("limit must be an integer from 1 to 1000"); it is never empty.
type QueryError struct {
	Violations []string
}

// Error returns the violations, one per line.
func (e *QueryError) Error() string {
	return ErrInvalidQuery.Error() + ":\n" + strings.Join(e.Violations, "\n")
}

// Unwrap makes errors.Is(err, ErrInvalidQuery) true.
func (e *QueryError) Unwrap() error { return ErrInvalidQuery }

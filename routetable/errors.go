package routetable

import (
	"strconv"
	"strings"
)

// Error codes of [Error].
const (
	// CodeInvalid: the table breaks the schema or a rule of contract §6.
	CodeInvalid = "route-table-invalid"
	// CodeStale: the table's revision is not newer than the applied one.
	CodeStale = "route-table-stale"
	// CodeAlreadyRefused: the revision was refused before; it is discarded without a
	// second report.
	CodeAlreadyRefused = "route-table-already-refused"
)

// Sentinels for errors.Is. Every error this package returns about a table is an *Error
// whose Code matches exactly one of them.
var (
	ErrInvalid        = &Error{Code: CodeInvalid, Revision: -1}
	ErrStale          = &Error{Code: CodeStale, Revision: -1}
	ErrAlreadyRefused = &Error{Code: CodeAlreadyRefused, Revision: -1}
)

// maxReportedViolations bounds the violations one Error carries (and so the log lines one
// refusal writes): a hostile 64 MiB table could otherwise hold millions. Past it, one last
// line says how many more there were.
const maxReportedViolations = 1000

// Error is the one error type of this package. Its text never contains key material: the
// violations name paths and rules, and echo only values that passed validation.
type Error struct {
	// Code is one of the Code* constants.
	Code string
	// Revision is the table's revision, or -1 when it is unknown (undecodable).
	Revision int64
	// Violations lists every broken rule, each starting with its JSON path. Empty for
	// CodeStale and CodeAlreadyRefused.
	Violations []string
}

func (e *Error) Error() string {
	var b strings.Builder
	switch e.Code {
	case CodeInvalid:
		b.WriteString("route table refused")
	case CodeStale:
		b.WriteString("route table revision is not newer than the applied one")
	case CodeAlreadyRefused:
		b.WriteString("route table revision was refused before")
	default:
		b.WriteString("route table error " + e.Code)
	}
	if e.Revision >= 0 {
		b.WriteString(" (revision " + strconv.FormatInt(e.Revision, 10) + ")")
	}
	for _, v := range e.Violations {
		b.WriteString("\n")
		b.WriteString(v)
	}
	return b.String()
}

// Is matches the sentinel with the same Code, so errors.Is(err, ErrInvalid) works for
// every invalid-table error whatever its revision and violations.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

func newInvalid(rev int64, violations []string) *Error {
	if len(violations) > maxReportedViolations {
		more := len(violations) - maxReportedViolations
		v := make([]string, maxReportedViolations+1)
		copy(v, violations[:maxReportedViolations])
		v[maxReportedViolations] = "… and " + strconv.Itoa(more) + " more violations"
		violations = v
	}
	return &Error{Code: CodeInvalid, Revision: rev, Violations: violations}
}

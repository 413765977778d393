package stats

import (
	"errors"
	"time"
)

// Day is a UTC calendar day, counted from 1970-01-01 (day 0).
// It marshals to JSON as its "YYYY-MM-DD" string.
type Day uint32

// DayOf returns the UTC day that t falls on. Times before 1970 map to day 0.
func DayOf(t time.Time) Day {
	s := t.Unix()
	if s < 0 {
		return 0
	}
	return Day(s / 86400)
}

// Time returns midnight UTC at the start of d.
func (d Day) Time() time.Time { return time.Unix(int64(d)*86400, 0).UTC() }

// String formats d as YYYY-MM-DD.
func (d Day) String() string { return d.Time().Format(time.DateOnly) }

// MarshalText formats d as YYYY-MM-DD.
func (d Day) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a YYYY-MM-DD day from 1970-01-01 on that exists on the calendar.
func (d *Day) UnmarshalText(b []byte) error {
	v, ok := ParseDay(string(b))
	if !ok {
		return errors.New("not an existing UTC calendar day from 1970-01-01 on")
	}
	*d = v
	return nil
}

// ParseDay reads a YYYY-MM-DD day that exists on the calendar, from 1970-01-01 on.
func ParseDay(s string) (Day, bool) {
	n, ok := parseDayNumber(s)
	if !ok || n < 0 || n > int64(^uint32(0)>>1) {
		return 0, false
	}
	return Day(n), true
}

// parseDayNumber reads a YYYY-MM-DD day that exists on the calendar (any year 0000–9999)
// as days since 1970-01-01, negative before it. The contract's Day is any existing day, so
// a query may name days before 1970; they simply hold no entries.
func parseDayNumber(s string) (int64, bool) {
	if len(s) != 10 {
		return 0, false
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil || t.Format(time.DateOnly) != s {
		return 0, false
	}
	// t is midnight UTC, so its Unix time is an exact multiple of a day.
	return t.Unix() / 86400, true
}

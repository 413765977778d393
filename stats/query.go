package stats

import (
	"encoding/json"
	"sort"

	"github.com/serve-zone/ingress/internal/jsonx"
)

// MaxLimit is the largest page a query may ask for (contract §5).
const MaxLimit = 1000

const msgCursor = "was not issued by this ingress for this range (start over without a cursor)"

// Query is one getClusterTrafficStatistics request (contract §5). The zero Limit is
// invalid; an empty Cursor asks for the first page.
type Query struct {
	FromDay, ToDay Day
	Cursor         string
	Limit          int

	// none marks a range that ends before 1970-01-01: valid on the wire, never any entry.
	none bool
}

// Entry is one IClusterTrafficStatistics: one UTC day of one hostname on this node.
// Its JSON keys come in the contract's order.
type Entry struct {
	Day             Day             `json:"dayUtc"`
	NodeID          string          `json:"nodeId"`
	Hostname        string          `json:"hostname"`
	Requests        uint64          `json:"requests"`
	BytesIn         uint64          `json:"bytesIn"`
	BytesOut        uint64          `json:"bytesOut"`
	Connections     uint64          `json:"connections"`
	BackendFailures BackendFailures `json:"backendFailures"`
}

// BackendFailures are an entry's backend failures by kind.
type BackendFailures struct {
	Connect   uint64 `json:"connect"`
	Handshake uint64 `json:"handshake"`
	Request   uint64 `json:"request"`
}

// Page is the response body of getClusterTrafficStatistics: the entries and, exactly when
// more entries follow, the cursor that resumes after the last one.
type Page struct {
	Statistics []Entry `json:"statistics"`
	NextCursor string  `json:"nextCursor,omitempty"`
}

// MarshalJSON writes a nil Statistics as [] (the contract's array is never null).
func (p Page) MarshalJSON() ([]byte, error) {
	type page Page
	if p.Statistics == nil {
		p.Statistics = []Entry{}
	}
	return json.Marshal(page(p))
}

// MaxRangeDays bounds a query's range: fromDayUtc to toDayUtc spans at most 366 days.
const MaxRangeDays = 366

// parseQuery reads an untrusted request body under the exact-schema rule and returns the
// query with every violation it finds. It cannot judge whether a non-empty cursor was
// issued for the range: Registry.Query and QueryRaw do that. Days before 1970-01-01 are
// valid and clamp to it (they hold no entries). It also reports whether the range itself
// was readable and in order, so that QueryRaw can judge the cursor alongside other
// violations.
func parseQuery(raw json.RawMessage) (Query, *jsonx.Errors, bool) {
	var q Query
	e := new(jsonx.Errors)
	m := jsonx.ObjectBody(raw, "", e, []string{"fromDayUtc", "toDayUtc", "limit"}, []string{"cursor"})
	if m == nil {
		return q, e, false
	}
	from, fromOK := dayField(m, "fromDayUtc", e)
	to, toOK := dayField(m, "toDayUtc", e)
	rangeOK := fromOK && toOK
	if rangeOK && from > to {
		e.Addf("fromDayUtc", "must not be after toDayUtc")
		rangeOK = false
	}
	if rangeOK && to-from >= MaxRangeDays {
		// Far beyond any retention; a bound keeps a query's cost obvious.
		e.Addf("toDayUtc", "must be less than %d days after fromDayUtc", MaxRangeDays)
		rangeOK = false
	}
	if rangeOK {
		switch {
		case to < 0:
			q.none = true
		case from < 0:
			q.ToDay = Day(to)
		default:
			q.FromDay, q.ToDay = Day(from), Day(to)
		}
	}
	if v, ok := m.Lookup("limit"); ok {
		if n, ok := jsonx.Int(v, "limit", e, 1, MaxLimit); ok {
			q.Limit = int(n)
		}
	}
	if v, ok := m.Lookup("cursor"); ok {
		if s, ok := jsonx.String(v, "cursor", e); ok {
			if s == "" {
				e.Addf("cursor", msgCursor)
			}
			q.Cursor = s
		}
	}
	return q, e, rangeOK
}

// dayField reads key of m as a Day string, as days since 1970 (negative before).
func dayField(m jsonx.Members, key string, e *jsonx.Errors) (int64, bool) {
	v, ok := m.Lookup(key)
	if !ok {
		return 0, false // reported as missing
	}
	if s, ok := v.AsString(); ok {
		if n, ok := parseDayNumber(s); ok && n <= int64(^uint32(0)>>1) {
			return n, true
		}
	}
	e.Addf(key, "must be an existing UTC calendar day")
	return 0, false
}

// QueryRaw answers a getClusterTrafficStatistics request body with its response body.
// An invalid request returns a *QueryError (errors.Is ErrInvalidQuery) naming every
// violation, the cursor's included. Safe for concurrent use.
func (r *Registry) QueryRaw(raw json.RawMessage) (json.RawMessage, error) {
	q, e, rangeOK := parseQuery(raw)
	if e.Len() > 0 {
		if rangeOK && q.Cursor != "" && !r.cursorValid(q) {
			e.Addf("cursor", msgCursor)
		}
		return nil, &QueryError{Violations: e.List()}
	}
	p, err := r.Query(q)
	if err != nil {
		return nil, err
	}
	return json.Marshal(p)
}

func (r *Registry) cursorValid(q Query) bool {
	if q.none {
		return false
	}
	_, _, ok := r.decodeCursor(q.Cursor, q.FromDay, q.ToDay)
	return ok
}

// Query returns one page of entries from q.FromDay to q.ToDay inside the retention
// window, ordered by day then hostname (byte order), today's read live. An invalid query
// (limit outside 1…MaxLimit, FromDay after ToDay, a cursor this registry did not issue
// for that range) returns a *QueryError. Safe for concurrent use; recording continues
// while it runs.
func (r *Registry) Query(q Query) (Page, error) {
	var e jsonx.Errors
	if q.FromDay > q.ToDay {
		e.Addf("fromDayUtc", "must not be after toDayUtc")
	}
	if q.Limit < 1 || q.Limit > MaxLimit {
		e.Addf("limit", "must be an integer from 1 to %d", MaxLimit)
	}
	start, after, hasAfter := q.FromDay, "", false
	if q.Cursor != "" && q.FromDay <= q.ToDay {
		if d, h, ok := r.decodeCursor(q.Cursor, q.FromDay, q.ToDay); ok && !q.none {
			start, after, hasAfter = d, h, true
		} else {
			e.Addf("cursor", msgCursor)
		}
	}
	if e.Len() > 0 {
		return Page{}, &QueryError{Violations: e.List()}
	}
	page := Page{Statistics: []Entry{}}
	if q.none {
		return page, nil
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	r.rollLocked(DayOf(r.now()))
	need := q.Limit + 1 // one more than asked tells whether more follow
	out := make([]Entry, 0, min(need, 256))
	hosts := r.sortedLocked()
	for _, d := range r.daysLocked(max(start, r.oldestLocked()), q.ToDay) {
		out = r.appendDayLocked(out, d, hosts, after, hasAfter && d == start, need)
		if len(out) == need {
			break
		}
	}
	if len(out) > q.Limit {
		out = out[:q.Limit]
		last := out[len(out)-1]
		page.NextCursor = r.encodeCursor(q.FromDay, q.ToDay, last.Day, last.Hostname)
	}
	page.Statistics = out
	return page, nil
}

// appendDayLocked appends day d's non-zero entries, in hostname order and strictly after
// hostname after when skip is set, until out holds need entries. It merges the live hosts
// with the hostnames archived (or restored) for d.
func (r *Registry) appendDayLocked(out []Entry, d Day, hosts []*Host, after string, skip bool, need int) []Entry {
	var live []*Host
	if r.isLiveLocked(d) {
		live = hosts
	}
	var hist []string
	if rec := r.history[d]; rec != nil {
		hist = rec.sortedNames()
	}
	i, j := 0, 0
	if skip {
		i = sort.Search(len(live), func(k int) bool { return live[k].name > after })
		j = sort.Search(len(hist), func(k int) bool { return hist[k] > after })
	}
	for (i < len(live) || j < len(hist)) && len(out) < need {
		var name string
		var h *Host
		switch {
		case j >= len(hist) || (i < len(live) && live[i].name < hist[j]):
			h, name = live[i], live[i].name
			i++
		case i >= len(live) || hist[j] < live[i].name:
			name = hist[j]
			j++
		default:
			h, name = live[i], live[i].name
			i++
			j++
		}
		if c := r.countersLocked(d, name, h); !c.IsZero() {
			out = append(out, entryOf(d, r.nodeID, name, c))
		}
	}
	return out
}

func entryOf(d Day, node, host string, c Counters) Entry {
	return Entry{
		Day:         d,
		NodeID:      node,
		Hostname:    host,
		Requests:    safe(c.Requests),
		BytesIn:     safe(c.BytesIn),
		BytesOut:    safe(c.BytesOut),
		Connections: safe(c.Connections),
		BackendFailures: BackendFailures{
			Connect:   safe(c.ConnectFailures),
			Handshake: safe(c.HandshakeFailures),
			Request:   safe(c.RequestFailures),
		},
	}
}

// safe caps a counter at the contract's largest Counter (2^53-1) instead of sending a
// number a JavaScript peer would round.
func safe(v uint64) uint64 { return min(v, jsonx.MaxSafeInteger) }

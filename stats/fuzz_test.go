package stats

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzParseQuery feeds arbitrary bodies to ParseQuery and QueryRaw: neither panics, every
// violation names its key, and a body without violations answers a well-formed page.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{
		`{"fromDayUtc":"2026-11-28","toDayUtc":"2026-11-30","limit":2}`,
		`{"fromDayUtc":"2026-11-28","toDayUtc":"2026-11-28","limit":1000,"cursor":"AQAAAAA"}`,
		`{"fromDayUtc":"1969-12-31","toDayUtc":"2026-01-01","limit":1.0}`,
		`{"fromDayUtc":"2026-02-29","toDayUtc":"2026-02-01","limit":0}`,
		`{"fromDayUtc":"2026-11-28","toDayUtc":"2026-11-30","limit":1e3,"x":null}`,
		`[]`, `null`, `{}`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	clk := newFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	r := NewRegistry(Options{Now: clk.Now, NodeID: "node-1"})
	r.Host("a.example.test").Request(1, 1)
	r.Host("b.example.test").Request(1, 1)
	f.Fuzz(func(t *testing.T, body []byte) {
		q, violations := ParseQuery(json.RawMessage(body))
		for _, v := range violations {
			if v == "" || !strings.Contains(v, " ") {
				t.Fatalf("violation %q does not name its problem", v)
			}
		}
		out, err := r.QueryRaw(json.RawMessage(body))
		if len(violations) > 0 {
			if !errors.Is(err, ErrInvalidQuery) {
				t.Fatalf("violations %q but QueryRaw err %v", violations, err)
			}
			return
		}
		if err != nil {
			if q.Cursor == "" || !errors.Is(err, ErrInvalidQuery) {
				t.Fatalf("valid query %+v refused: %v", q, err)
			}
			return
		}
		var p Page
		if err := json.Unmarshal(out, &p); err != nil || p.Statistics == nil || len(p.Statistics) > q.Limit {
			t.Fatalf("answer %s (%v) for %+v", out, err, q)
		}
	})
}

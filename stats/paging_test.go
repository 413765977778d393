package stats

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

func entryKey(e Entry) string { return e.Day.String() + "/" + e.Hostname }

func TestQueryPagingIsOrderedAndComplete(t *testing.T) {
	r, _ := newFilledRegistry(t)
	from, to := mustDay(t, "2026-11-01"), mustDay(t, "2026-11-30")
	all := queryAll(t, r, from, to, 1000)
	if len(all) != 12 { // 2 on the 28th, 5 on the 29th, 5 on the 30th
		t.Fatalf("%d entries: %+v", len(all), all)
	}
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if a.Day > b.Day || a.Day == b.Day && a.Hostname >= b.Hostname {
			t.Fatalf("out of order: %s before %s", entryKey(a), entryKey(b))
		}
	}
	for _, e := range all {
		if e.Hostname == "idle.example.test" {
			t.Fatal("a host without traffic produced an entry")
		}
	}
	for _, limit := range []int{1, 2, 3, 5, 11, 12, 13} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			if got := queryAll(t, r, from, to, limit); !reflect.DeepEqual(got, all) {
				t.Fatalf("paged by %d: %v\nwant %v", limit, got, all)
			}
		})
	}
	t.Run("no cursor on an exact last page", func(t *testing.T) {
		p, err := r.Query(Query{FromDay: from, ToDay: to, Limit: 12})
		if err != nil || len(p.Statistics) != 12 || p.NextCursor != "" {
			t.Fatalf("page %d entries, cursor %q, err %v", len(p.Statistics), p.NextCursor, err)
		}
		b, _ := json.Marshal(p)
		var m map[string]json.RawMessage
		json.Unmarshal(b, &m)
		if _, ok := m["nextCursor"]; ok {
			t.Fatalf("nextCursor present without more entries: %s", b)
		}
	})
	t.Run("empty range is an empty array", func(t *testing.T) {
		body, err := r.QueryRaw(json.RawMessage(`{"fromDayUtc":"2026-10-01","toDayUtc":"2026-10-02","limit":5}`))
		if err != nil || string(body) != `{"statistics":[]}` {
			t.Fatalf("body %s, err %v", body, err)
		}
		body, err = r.QueryRaw(json.RawMessage(`{"fromDayUtc":"1969-10-01","toDayUtc":"1969-10-02","limit":5}`))
		if err != nil || string(body) != `{"statistics":[]}` {
			t.Fatalf("before 1970: body %s, err %v", body, err)
		}
	})
}

func TestQueryTodayIsLive(t *testing.T) {
	r, clk := newFilledRegistry(t)
	d := DayOf(clk.Now())
	h := r.Host("h00.example.test")
	before := queryAll(t, r, d, d, 100)
	h.Request(7, 7)
	after := queryAll(t, r, d, d, 100)
	if after[0].Requests != before[0].Requests+1 {
		t.Fatalf("today's requests %d, then %d", before[0].Requests, after[0].Requests)
	}
}

// A hostname created between pages that sorts before the cursor shows up only in the
// next query; one that sorts after it shows up on the next page; nothing repeats and
// nothing that existed is skipped.
func TestQueryCursorResumesStrictlyAfter(t *testing.T) {
	r, clk := newFilledRegistry(t)
	d := DayOf(clk.Now())
	p1, err := r.Query(Query{FromDay: d, ToDay: d, Limit: 2})
	if err != nil || p1.NextCursor == "" {
		t.Fatal(p1, err)
	}
	r.Host("a-early.example.test").Request(1, 1) // sorts before the cursor
	r.Host("z-late.example.test").Request(1, 1)  // sorts after it
	rest := queryAll(t, r, d, d, 2)              // a fresh query, for comparison
	var paged []Entry
	q := Query{FromDay: d, ToDay: d, Limit: 2, Cursor: p1.NextCursor}
	for {
		p, err := r.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, p.Statistics...)
		if p.NextCursor == "" {
			break
		}
		q.Cursor = p.NextCursor
	}
	var keys []string
	for _, e := range append(p1.Statistics, paged...) {
		keys = append(keys, e.Hostname)
	}
	want := []string{"h00.example.test", "h01.example.test", "h02.example.test", "h03.example.test",
		"h04.example.test", "z-late.example.test"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("paged %v, want %v", keys, want)
	}
	if rest[0].Hostname != "a-early.example.test" {
		t.Fatalf("the next query starts with %s", rest[0].Hostname)
	}
}

func TestQueryRefusesForeignCursors(t *testing.T) {
	r, clk := newFilledRegistry(t)
	other, _ := newFilledRegistry(t)
	d := DayOf(clk.Now())
	from := d - 2
	p, err := r.Query(Query{FromDay: from, ToDay: d, Limit: 2})
	if err != nil || p.NextCursor == "" {
		t.Fatal(err)
	}
	c := p.NextCursor
	flipped := []byte(c)
	flipped[3] ^= 1
	po, _ := other.Query(Query{FromDay: from, ToDay: d, Limit: 2})
	cases := map[string]Query{
		"other range":    {FromDay: from, ToDay: d - 1, Limit: 2, Cursor: c},
		"other from":     {FromDay: from - 1, ToDay: d, Limit: 2, Cursor: c},
		"forged":         {FromDay: from, ToDay: d, Limit: 2, Cursor: string(flipped)},
		"truncated":      {FromDay: from, ToDay: d, Limit: 2, Cursor: c[:len(c)-2]},
		"very truncated": {FromDay: from, ToDay: d, Limit: 2, Cursor: c[:4]},
		"other registry": {FromDay: from, ToDay: d, Limit: 2, Cursor: po.NextCursor},
		"not base64":     {FromDay: from, ToDay: d, Limit: 2, Cursor: "!!!!"},
	}
	for name, q := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := r.Query(q)
			var qe *QueryError
			if !errors.As(err, &qe) || !reflect.DeepEqual(qe.Violations, []string{"cursor " + msgCursor}) {
				t.Fatalf("err = %v", err)
			}
		})
	}
	t.Run("same range accepted", func(t *testing.T) {
		if _, err := r.Query(Query{FromDay: from, ToDay: d, Limit: 7, Cursor: c}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("raw names the cursor with other violations", func(t *testing.T) {
		body := fmt.Sprintf(`{"fromDayUtc":%q,"toDayUtc":%q,"limit":0,"cursor":%q}`, from, d-1, c)
		_, err := r.QueryRaw(json.RawMessage(body))
		var qe *QueryError
		want := []string{"limit must be an integer from 1 to 1000", "cursor " + msgCursor}
		if !errors.As(err, &qe) || !reflect.DeepEqual(qe.Violations, want) {
			t.Fatalf("err = %v, want %q", err, want)
		}
	})
}

func TestQueryTypedValidation(t *testing.T) {
	r := NewRegistry(Options{})
	_, err := r.Query(Query{FromDay: 10, ToDay: 9, Limit: 0})
	var qe *QueryError
	want := []string{"fromDayUtc must not be after toDayUtc", "limit must be an integer from 1 to 1000"}
	if !errors.As(err, &qe) || !reflect.DeepEqual(qe.Violations, want) {
		t.Fatalf("err = %v", err)
	}
	if _, err := r.Query(Query{FromDay: 9, ToDay: 9, Limit: 1001}); !errors.Is(err, ErrInvalidQuery) {
		t.Fatalf("limit 1001: err = %v", err)
	}
}

// Query reports nothing older than the retention window, even when the window moved
// between two pages of one walk.
func TestQueryHonoursRetention(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := newFakeClock(start)
	r := NewRegistry(Options{Now: clk.Now})
	h := r.Host("a")
	for i := range DefaultRetentionDays {
		clk.Set(start.AddDate(0, 0, i))
		r.Roll(clk.Now())
		h.Request(1, 0)
	}
	from, to := DayOf(start), DayOf(clk.Now())
	p, _ := r.Query(Query{FromDay: from, ToDay: to, Limit: 1})
	if p.Statistics[0].Day != from || p.NextCursor == "" {
		t.Fatalf("first page %+v", p)
	}
	clk.Set(start.AddDate(0, 0, DefaultRetentionDays+1)) // the window moves two days on
	p2, err := r.Query(Query{FromDay: from, ToDay: to, Limit: 1, Cursor: p.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p2.Statistics[0].Day, from+2; got != want {
		t.Fatalf("second page day %s, want %s", got, want)
	}
}

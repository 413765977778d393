package stats

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"
)

// readExample returns the "request" or "response" body of a contract example.
func readExample(t *testing.T, name, field string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name) // copies of the contract's examples
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	return env[field]
}

func TestQueryRawExampleInvalid(t *testing.T) {
	r := NewRegistry(Options{})
	_, err := r.QueryRaw(readExample(t, "request-invalid.json", "request"))
	var qe *QueryError
	if !errors.As(err, &qe) || !errors.Is(err, ErrInvalidQuery) {
		t.Fatalf("err = %v, want a *QueryError", err)
	}
	var data struct {
		Errors []string `json:"errors"`
	}
	var e struct {
		Data json.RawMessage `json:"data"`
	}
	json.Unmarshal(readExampleError(t), &e)
	json.Unmarshal(e.Data, &data)
	if !reflect.DeepEqual(qe.Violations, data.Errors) {
		t.Fatalf("violations %q, example says %q", qe.Violations, data.Errors)
	}
}

func readExampleError(t *testing.T) json.RawMessage {
	return readExample(t, "request-invalid.json", "error")
}

func TestParseQueryViolations(t *testing.T) {
	cases := []struct {
		name, body string
		want       []string
	}{
		{"valid", `{"fromDayUtc":"2026-11-28","toDayUtc":"2026-11-30","limit":2}`, nil},
		{"valid limit 1.0", `{"fromDayUtc":"2026-11-28","toDayUtc":"2026-11-28","limit":1.0}`, nil},
		{"valid 1000 and before 1970", `{"fromDayUtc":"1969-06-01","toDayUtc":"1970-01-01","limit":1000}`, nil},
		{"range of 366 days", `{"fromDayUtc":"2025-11-30","toDayUtc":"2026-11-30","limit":1}`, nil},
		{"range over 366 days", `{"fromDayUtc":"2025-11-29","toDayUtc":"2026-11-30","limit":1}`,
			[]string{"toDayUtc must be less than 366 days after fromDayUtc"}},
		{"example", `{"fromDayUtc":"2026-02-29","toDayUtc":"2026-02-01","limit":0}`,
			[]string{"fromDayUtc must be an existing UTC calendar day", "limit must be an integer from 1 to 1000"}},
		{"bad to", `{"fromDayUtc":"2026-02-01","toDayUtc":"2026-02-30","limit":1}`,
			[]string{"toDayUtc must be an existing UTC calendar day"}},
		{"not strings", `{"fromDayUtc":20261128,"toDayUtc":null,"limit":1}`,
			[]string{"fromDayUtc must be an existing UTC calendar day", "toDayUtc must be an existing UTC calendar day"}},
		{"from after to", `{"fromDayUtc":"2026-11-30","toDayUtc":"2026-11-28","limit":1}`,
			[]string{"fromDayUtc must not be after toDayUtc"}},
		{"limit 1001", `{"fromDayUtc":"2026-11-28","toDayUtc":"2026-11-28","limit":1001}`,
			[]string{"limit must be an integer from 1 to 1000"}},
		{"limit fractional", `{"fromDayUtc":"2026-11-28","toDayUtc":"2026-11-28","limit":1.5}`,
			[]string{"limit must be an integer from 1 to 1000"}},
		{"limit string", `{"fromDayUtc":"2026-11-28","toDayUtc":"2026-11-28","limit":"5"}`,
			[]string{"limit must be an integer from 1 to 1000"}},
		{"extra and missing keys", `{"fromDayUtc":"2026-11-28","limit":5,"zz":1,"nodeId":"x"}`,
			[]string{"toDayUtc is missing", "nodeId is not allowed", "zz is not allowed"}},
		{"cursor not a string", `{"fromDayUtc":"2026-11-28","toDayUtc":"2026-11-28","limit":5,"cursor":7}`,
			[]string{"cursor must be a string"}},
		{"cursor null", `{"fromDayUtc":"2026-11-28","toDayUtc":"2026-11-28","limit":5,"cursor":null}`,
			[]string{"cursor must be a string"}},
		{"cursor empty", `{"fromDayUtc":"2026-11-28","toDayUtc":"2026-11-28","limit":5,"cursor":""}`,
			[]string{"cursor " + msgCursor}},
		{"not an object", `[1]`, []string{"the value must be an object"}},
		{"null", `null`, []string{"the value must be an object"}},
		{"repeated key", `{"fromDayUtc":"2026-11-28","toDayUtc":"2026-11-28","limit":5,"limit":6}`,
			[]string{"limit is repeated"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, got := ParseQuery(json.RawMessage(tc.body))
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("violations %q, want %q", got, tc.want)
			}
		})
	}
}

// newFilledRegistry returns a registry on 2026-11-30 with traffic on three days.
func newFilledRegistry(t *testing.T) (*Registry, *fakeClock) {
	t.Helper()
	clk := newFakeClock(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))
	r := NewRegistry(Options{Now: clk.Now, NodeID: "node-1"})
	api, plain, idle := r.Host("api.example.test"), r.Host("plain.example.test"), r.Host("idle.example.test")
	_ = idle // known, never used: produces no entry
	for i := range 1520 {
		api.Request(int64(412000/1520), 6000)
		if i < 311 {
			api.Connection()
		}
	}
	api.BackendFailure(FailureConnect)
	api.BackendFailure(FailureConnect)
	api.BackendFailure(FailureRequest)
	for range 40 {
		plain.Request(5100/40, 2200)
	}
	for day := 1; day <= 2; day++ {
		clk.Set(time.Date(2026, 11, 28+day, 10, 0, 0, 0, time.UTC))
		r.Roll(clk.Now())
		for i := range 5 {
			r.Host(fmt.Sprintf("h%02d.example.test", i)).Request(1, 1)
		}
	}
	return r, clk
}

func TestQueryRawMatchesExampleShape(t *testing.T) {
	r, _ := newFilledRegistry(t)
	body, err := r.QueryRaw(readExample(t, "traffic-statistics-request.json", "request"))
	if err != nil {
		t.Fatal(err)
	}
	want := readExample(t, "traffic-statistics-response.json", "response")
	// Same keys in the same order, cursor aside.
	var gotPage, wantPage struct {
		Statistics []json.RawMessage `json:"statistics"`
		NextCursor *string           `json:"nextCursor"`
	}
	json.Unmarshal(body, &gotPage)
	json.Unmarshal(want, &wantPage)
	if gotPage.NextCursor == nil || *gotPage.NextCursor == "" {
		t.Fatalf("no nextCursor in %s", body)
	}
	if len(gotPage.Statistics) != 2 {
		t.Fatalf("%d entries: %s", len(gotPage.Statistics), body)
	}
	if k1, k2 := keyOrder(t, body), keyOrder(t, want); !reflect.DeepEqual(k1, k2) {
		t.Fatalf("key order %v, example %v", k1, k2)
	}
	var first Entry
	json.Unmarshal(gotPage.Statistics[0], &first)
	var wantFirst Entry
	json.Unmarshal(wantPage.Statistics[0], &wantFirst)
	wantFirst.BytesIn, first.BytesIn = 0, 0 // 412000/1520 does not divide
	wantFirst.BytesOut, first.BytesOut = 0, 0
	if first != wantFirst {
		t.Fatalf("first entry %+v, want %+v", first, wantFirst)
	}
}

// keyOrder lists every object key in document order.
func keyOrder(t *testing.T, b []byte) []string {
	t.Helper()
	var keys []string
	if err := walkKeys(json.NewDecoder(bytes.NewReader(b)), &keys); err != nil {
		t.Fatal(err)
	}
	return keys
}

func walkKeys(dec *json.Decoder, keys *[]string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			*keys = append(*keys, k.(string))
			if err := walkKeys(dec, keys); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	case json.Delim('['):
		for dec.More() {
			if err := walkKeys(dec, keys); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	}
	return err
}

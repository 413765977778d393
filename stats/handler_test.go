package stats

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"testing"
)

func TestHandler(t *testing.T) {
	r, _ := newFilledRegistry(t)
	srv := httptest.NewServer(r.Handler()) // listens on 127.0.0.1
	defer srv.Close()

	get := func(t *testing.T, method, path string) (int, http.Header, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}

	t.Run("pages", func(t *testing.T) {
		var all []Entry
		cursor := ""
		for {
			v := url.Values{"fromDayUtc": {"2026-11-28"}, "toDayUtc": {"2026-11-30"}, "limit": {"5"}}
			if cursor != "" {
				v.Set("cursor", cursor)
			}
			code, h, body := get(t, http.MethodGet, HandlerPath+"?"+v.Encode())
			if code != 200 || h.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %s: %s", code, h.Get("Content-Type"), body)
			}
			var p struct {
				Statistics []Entry `json:"statistics"`
				NextCursor string  `json:"nextCursor"`
			}
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatal(err)
			}
			all = append(all, p.Statistics...)
			if p.NextCursor == "" {
				break
			}
			cursor = p.NextCursor
		}
		if want := queryAll(t, r, mustDay(t, "2026-11-28"), mustDay(t, "2026-11-30"), 1000); !reflect.DeepEqual(all, want) {
			t.Fatalf("over HTTP %v\nwant %v", all, want)
		}
	})

	t.Run("default limit", func(t *testing.T) {
		// No limit: a page of DefaultHandlerLimit, as if it had been given.
		const q = "fromDayUtc=2026-11-28&toDayUtc=2026-11-30"
		code, _, without := get(t, http.MethodGet, HandlerPath+"?"+q)
		_, _, with := get(t, http.MethodGet, HandlerPath+"?"+q+"&limit="+strconv.Itoa(DefaultHandlerLimit))
		_, _, one := get(t, http.MethodGet, HandlerPath+"?"+q+"&limit=1")
		if code != http.StatusOK || string(without) != string(with) || string(without) == string(one) {
			t.Fatalf("without a limit: %d %s\nwith limit=%d: %s", code, without, DefaultHandlerLimit, with)
		}
	})

	for _, tc := range []struct {
		name, query string
		want        []string
	}{
		{"example", "fromDayUtc=2026-02-29&toDayUtc=2026-02-01&limit=0",
			[]string{"fromDayUtc must be an existing UTC calendar day", "limit must be an integer from 1 to 1000"}},
		{"limit not an integer", "fromDayUtc=2026-11-28&toDayUtc=2026-11-28&limit=5x",
			[]string{"limit must be an integer from 1 to 1000"}},
		{"limit fractional", "fromDayUtc=2026-11-28&toDayUtc=2026-11-28&limit=1.5",
			[]string{"limit must be an integer from 1 to 1000"}},
		{"unknown parameter and missing one", "fromDayUtc=2026-11-28&limit=5&node=x",
			[]string{"toDayUtc is missing", "node is not allowed"}},
		{"repeated", "fromDayUtc=2026-11-28&toDayUtc=2026-11-28&limit=5&limit=6",
			[]string{"limit must be an integer from 1 to 1000"}},
		{"forged cursor", "fromDayUtc=2026-11-28&toDayUtc=2026-11-28&limit=5&cursor=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
			[]string{"cursor " + msgCursor}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, h, body := get(t, http.MethodGet, HandlerPath+"?"+tc.query)
			var e struct {
				Errors []string `json:"errors"`
			}
			if code != 400 || h.Get("Content-Type") != "application/json" || json.Unmarshal(body, &e) != nil {
				t.Fatalf("%d %s", code, body)
			}
			if !reflect.DeepEqual(e.Errors, tc.want) {
				t.Fatalf("errors %q, want %q", e.Errors, tc.want)
			}
		})
	}

	t.Run("POST is 405", func(t *testing.T) {
		code, h, _ := get(t, http.MethodPost, HandlerPath)
		if code != 405 || h.Get("Allow") != "GET" {
			t.Fatalf("%d, Allow %q", code, h.Get("Allow"))
		}
	})
	t.Run("other path is 404", func(t *testing.T) {
		if code, _, _ := get(t, http.MethodGet, "/v1/other"); code != 404 {
			t.Fatalf("%d", code)
		}
	})
}

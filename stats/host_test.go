package stats

import (
	"testing"
	"time"
	"unsafe"
)

func TestRecordingAllocatesNothing(t *testing.T) {
	r := NewRegistry(Options{})
	h := r.Host("a.example.test")
	var tot Totals
	cases := map[string]func(){
		"Request":        func() { h.Request(100, 200) },
		"Bytes":          func() { h.Bytes(1, 2) },
		"Connection":     func() { h.Connection() },
		"BackendFailure": func() { h.BackendFailure(FailureRequest) },
		"nil Host":       func() { (*Host)(nil).Request(1, 1) },
		"Totals":         func() { tot.Request(ProtoHTTP2, 204, 10, 20); tot.InFlight(1); tot.Conn(ProtoHTTP1, 1) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			if n := testing.AllocsPerRun(1000, f); n != 0 {
				t.Fatalf("%s allocates %v times per call", name, n)
			}
		})
	}
}

func TestHostRecordsIntoToday(t *testing.T) {
	clk := newFakeClock(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	r := NewRegistry(Options{Now: clk.Now, NodeID: "node-1"})
	h := r.Host("api.example.test")
	if r.Host("api.example.test") != h {
		t.Fatal("Host returned a second Host for the same name")
	}
	h.Request(10, 20)
	h.Request(-5, 1) // negative bytes count as zero
	h.Bytes(3, -1)
	h.Connection()
	h.BackendFailure(FailureConnect)
	h.BackendFailure(FailureHandshake)
	h.BackendFailure(FailureRequest)
	h.BackendFailure(FailureRequest)
	h.BackendFailure(FailureKind(200)) // ignored
	var nilHost *Host
	nilHost.Request(1, 1)
	nilHost.Bytes(1, 1)
	nilHost.Connection()
	nilHost.BackendFailure(FailureConnect)

	d := mustDay(t, "2026-11-28")
	got := queryAll(t, r, d, d, 10)
	want := []Entry{{Day: d, NodeID: "node-1", Hostname: "api.example.test", Requests: 2, BytesIn: 13, BytesOut: 21,
		Connections: 1, BackendFailures: BackendFailures{Connect: 1, Handshake: 1, Request: 2}}}
	if len(got) != 1 || got[0] != want[0] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestHostSlotsCacheLineAligned checks the layout claim in Host's doc comment: every
// slot of every Host starts on a 64-byte boundary.
func TestHostSlotsCacheLineAligned(t *testing.T) {
	if s := unsafe.Sizeof(slot{}); s != 64 {
		t.Fatalf("slot is %d bytes, want 64", s)
	}
	if s := unsafe.Sizeof(Host{}); s%64 != 0 {
		t.Fatalf("Host is %d bytes, not a multiple of 64", s)
	}
	r := NewRegistry(Options{})
	for i := range 1000 {
		h := r.Host(string(rune('a'+i%26)) + time.Duration(i).String())
		for k := range h.slots {
			if p := uintptr(unsafe.Pointer(&h.slots[k])); p%64 != 0 {
				t.Fatalf("host %d slot %d at %#x, not cache-line aligned", i, k, p)
			}
		}
	}
}

func TestDayParse(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"2026-11-28", true}, {"2024-02-29", true}, {"1970-01-01", true},
		{"2026-02-29", false}, {"2026-13-01", false}, {"2026-1-01", false}, {"26-11-28", false},
		{"2026-11-28T00:00:00Z", false}, {"", false}, {"1969-12-31", false},
	} {
		d, ok := ParseDay(tc.in)
		if ok != tc.ok {
			t.Errorf("ParseDay(%q) ok=%v, want %v", tc.in, ok, tc.ok)
		}
		if ok && d.String() != tc.in {
			t.Errorf("ParseDay(%q).String() = %q", tc.in, d)
		}
	}
}

// TestHostsBatch: Hosts returns the same Host as Host for a known name, one Host for a
// name given twice, and new Hosts whose slots are cache-line aligned like Host's.
func TestHostsBatch(t *testing.T) {
	r := NewRegistry(Options{})
	known := r.Host("known.test")
	names := []string{"a.test", "known.test", "b.test", "a.test"}
	for i := range 3000 {
		names = append(names, "h"+time.Duration(i).String()+".test")
	}
	hs := r.Hosts(names)
	if hs[1] != known || hs[0] != hs[3] || hs[0] == hs[2] || hs[0].Name() != "a.test" {
		t.Fatalf("Hosts = %v", hs[:4])
	}
	for i, h := range hs {
		if r.Host(names[i]) != h {
			t.Fatalf("Host(%q) is not what Hosts returned", names[i])
		}
		for k := range h.slots {
			if p := uintptr(unsafe.Pointer(&h.slots[k])); p%64 != 0 {
				t.Fatalf("host %d slot %d at %#x, not cache-line aligned", i, k, p)
			}
		}
	}
	hs[2].Request(10, 20)
	if got := r.Host("b.test"); got.cur().requests.Load() != 1 {
		t.Fatal("a request on a batch Host is not counted under its name")
	}
}

// TestHostsFirstTableIndexedLater: the first table's Hosts are handed out before they are
// indexed; what is recorded in them meanwhile is found by every reader afterwards.
func TestHostsFirstTableIndexedLater(t *testing.T) {
	r := NewRegistry(Options{})
	hs := r.Hosts([]string{"a.test", "b.test"})
	if len(r.pending) != 2 || len(r.hosts) != 0 {
		t.Fatalf("pending %d, indexed %d: the first table's Hosts should wait", len(r.pending), len(r.hosts))
	}
	hs[1].Request(1, 2)
	if r.Host("b.test") != hs[1] || r.Host("a.test") != hs[0] {
		t.Fatal("Host does not find the Hosts made by Hosts")
	}
	again := r.Hosts([]string{"b.test", "c.test"})
	if again[0] != hs[1] || again[1] == nil || again[1].Name() != "c.test" {
		t.Fatalf("Hosts after the first = %v", again)
	}
	fresh := NewRegistry(Options{})
	fresh.Hosts([]string{"q.test"})[0].Request(3, 4)
	if got := fresh.todayCounters(); len(got) != 1 || got[0].name != "q.test" || got[0].c.Requests != 1 {
		t.Fatalf("today's counters %+v, want q.test with one request", got)
	}
}

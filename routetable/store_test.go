package routetable

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/serve-zone/ingress/stats"
)

func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(core), logs
}

// metric reads one of the store's collectors by name.
func metric(t *testing.T, s *Store, name string) float64 {
	t.Helper()
	for _, c := range s.Collectors() {
		ch := make(chan *prometheus.Desc, 1)
		c.Describe(ch)
		if strings.Contains((<-ch).String(), `"`+name+`"`) {
			mc := make(chan prometheus.Metric, 1)
			c.Collect(mc)
			var m dto.Metric
			if err := (<-mc).Write(&m); err != nil {
				t.Fatal(err)
			}
			if m.Gauge != nil {
				return m.Gauge.GetValue()
			}
			return m.Counter.GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestStoreApplyStaleAndRefused(t *testing.T) {
	log, logs := observed()
	reg := stats.NewRegistry(stats.Options{})
	s := NewStore(StoreOptions{Stats: reg, Logger: log})
	if s.Load() != nil || metric(t, s, "ingress_route_table_revision") != -1 {
		t.Fatal("a new store serves nothing and reports revision -1")
	}
	if _, ok := s.Applied(); ok {
		t.Fatal("Applied before any apply")
	}
	if err := s.Apply(validTable(t)); err != nil {
		t.Fatal(err)
	}
	serving := s.Load()
	if rev, ok := s.Applied(); !ok || rev != 7 {
		t.Fatalf("Applied = %d %v", rev, ok)
	}
	if e := serving.Lookup("api.example.test"); e == nil || e.Stats != reg.Host("api.example.test") {
		t.Fatal("the route must carry its hostname's counters")
	}

	for _, rev := range []int64{7, 6, 0} {
		tb := validTable(t)
		tb.Revision = rev
		if err := s.Apply(tb); !errors.Is(err, ErrStale) {
			t.Fatalf("revision %d: %v, want ErrStale", rev, err)
		}
	}

	bad := validTable(t)
	bad.Revision = 9
	bad.Routes[1].Targets[0].Port = 0
	bad.Routes[2].Hostname = "plain.EXAMPLE.test"
	before := logs.Len()
	err := s.Apply(bad)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("%v, want ErrInvalid", err)
	}
	if s.Load() != serving {
		t.Fatal("a refusal replaced the serving table")
	}
	if e := s.Load().Lookup("API.example.test:443"); e == nil || e.Hostname != "api.example.test" {
		t.Fatal("lookups on the serving table must still answer after a refusal")
	}
	if !s.Refused(9) || s.Refused(7) {
		t.Fatal("Refused must name exactly the refused revision")
	}
	if got := logs.Len() - before; got != 3 { // one summary line and one per violation
		t.Fatalf("%d log lines for a refusal with 2 violations:\n%v", got, logs.All())
	}
	if metric(t, s, "ingress_route_table_refusals_total") != 1 {
		t.Fatal("refusal not counted")
	}
	// The same revision again (a periodic re-pull) is discarded without a second report.
	before = logs.Len()
	if err := s.Apply(bad); !errors.Is(err, ErrAlreadyRefused) {
		t.Fatalf("%v, want ErrAlreadyRefused", err)
	}
	if logs.Len() != before || metric(t, s, "ingress_route_table_refusals_total") != 1 {
		t.Fatal("a second report of a refused revision")
	}
	// Hints: not for the applied revision, the refused one or anything below it.
	for rev, want := range map[int64]bool{6: false, 7: false, 8: false, 9: false, 10: true} {
		if got := s.WantsRevision(rev); got != want {
			t.Errorf("WantsRevision(%d) = %v, want %v", rev, got, want)
		}
	}
	// A newer valid table is applied.
	good := validTable(t)
	good.Revision = 10
	if err := s.Apply(good); err != nil {
		t.Fatal(err)
	}
	if metric(t, s, "ingress_route_table_revision") != 10 || metric(t, s, "ingress_route_table_routes") != 3 ||
		metric(t, s, "ingress_route_table_applies_total") != 2 || metric(t, s, "ingress_route_table_certificates_expired") != 0 {
		t.Fatal("metrics do not follow the applies")
	}
}

func TestStoreRefusedMemoryIsBounded(t *testing.T) {
	s := NewStore(StoreOptions{})
	for rev := int64(1); rev <= refusedMemory+6; rev++ {
		if err := s.Apply(&Table{Revision: rev, Routes: []Route{{Hostname: "a.test"}}}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("revision %d: %v", rev, err)
		}
	}
	if len(*s.refused.Load()) != refusedMemory {
		t.Fatalf("remembers %d revisions", len(*s.refused.Load()))
	}
	if s.Refused(6) || !s.Refused(7) || !s.Refused(refusedMemory+6) {
		t.Fatal("the oldest refused revisions must be forgotten first")
	}
}

func TestStoreApplyJSON(t *testing.T) {
	log, logs := observed()
	s := NewStore(StoreOptions{Logger: log})
	data := exampleTables(t)["route-table.json"]
	if err := s.ApplyJSON(data); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyJSON(data); !errors.Is(err, ErrStale) {
		t.Fatalf("%v, want ErrStale", err)
	}
	bad := []byte(`{"revision": 8, "routes": [{"hostname": 1}], "certificates": []}`)
	if err := s.ApplyJSON(bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("%v, want ErrInvalid", err)
	}
	if !s.Refused(8) || metric(t, s, "ingress_route_table_refusals_total") != 1 {
		t.Fatal("a schema refusal must be remembered and counted")
	}
	n := logs.Len()
	if err := s.ApplyJSON(bad); !errors.Is(err, ErrAlreadyRefused) || logs.Len() != n {
		t.Fatalf("%v: a refused revision must not be reported twice", err)
	}
	if rev, _ := s.Applied(); rev != 7 {
		t.Fatalf("applied %d", rev)
	}
}

func TestStoreApplyStandalone(t *testing.T) {
	s := NewStore(StoreOptions{Mode: ModeStandalone})
	if err := s.ApplyStandalone(validTable(t), true); err != nil {
		t.Fatal(err)
	}
	same := validTable(t)
	same.Routes[2].Targets[0].Port = 81
	if err := s.ApplyStandalone(same, false); !errors.Is(err, ErrStale) {
		t.Fatalf("unchanged content: %v, want ErrStale", err)
	}
	if err := s.ApplyStandalone(same, true); err != nil {
		t.Fatalf("changed content, same revision: %v", err)
	}
	if got := s.Load().Lookup("plain.example.test").Backends[0].Addr; got != "127.0.0.3:81" {
		t.Fatalf("serving %s", got)
	}
	older := validTable(t)
	older.Revision = 2
	older.Routes[2].TLS = &RouteTLS{ACME: true}
	if err := s.ApplyStandalone(older, true); err != nil {
		t.Fatalf("an older revision whose content changed: %v", err)
	}
	if rev, _ := s.Applied(); rev != 2 || !s.Load().Lookup("plain.example.test").TLS.ACME {
		t.Fatalf("applied %d", rev)
	}
}

func TestTargetStateSurvivesSwap(t *testing.T) {
	s := NewStore(StoreOptions{})
	first := validTable(t)
	if err := s.Apply(first); err != nil {
		t.Fatal(err)
	}
	c1 := s.Load()
	kept := c1.Lookup("api.example.test").Backends[0].State
	removed := c1.Lookup("api.example.test").Backends[1].State
	kept.InFlight.Add(3)
	kept.Failures.Store(2)
	removed.InFlight.Add(5)
	removed.DownUntil.Store(12345)

	second := validTable(t)
	second.Revision = 8
	second.Routes[1].Targets = second.Routes[1].Targets[:1]                                                          // lease-api-2 removed
	second.Routes[2].Targets = append(second.Routes[2].Targets, Target{LeaseID: "n", Address: "127.0.0.4", Port: 1}) // a new one
	if err := s.Apply(second); err != nil {
		t.Fatal(err)
	}
	c2 := s.Load()
	if got := c2.Lookup("api.example.test").Backends[0].State; got != kept {
		t.Fatal("a target present in both tables must keep its *TargetState")
	}
	if kept.InFlight.Load() != 3 || kept.Failures.Load() != 2 {
		t.Fatal("the kept state was reset")
	}
	if removed.InFlight.Load() != 5 || removed.DownUntil.Load() != 12345 || removed.Failures.Load() != 0 {
		t.Fatal("the swap mutated a removed target's state")
	}
	if fresh := c2.Lookup("plain.example.test").Backends[1].State; fresh == kept || fresh == removed || fresh.InFlight.Load() != 0 {
		t.Fatal("a new target needs a fresh state")
	}
	// The old table still works for requests that loaded it before the swap.
	if c1.Lookup("api.example.test").Backends[1].State != removed {
		t.Fatal("the old compiled table changed")
	}
	// A target that returns after a table without it starts fresh: its old state is gone.
	if err := s.Apply(&Table{Revision: 9, Routes: first.Routes, Certificates: first.Certificates}); err != nil {
		t.Fatal(err)
	}
	if s.Load().Lookup("api.example.test").Backends[1].State == removed {
		t.Fatal("a removed target's state must not be resurrected")
	}
}

func TestStoreLoadNeverBlocksDuringApply(t *testing.T) {
	s := NewStore(StoreOptions{})
	if err := s.Apply(validTable(t)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if c := s.Load(); c == nil || c.Lookup("api.example.test") == nil {
				t.Error("lookup failed during applies")
				return
			}
		}
	}()
	for rev := int64(8); rev < 30; rev++ {
		tb := validTable(t)
		tb.Revision = rev
		if err := s.Apply(tb); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// keyLines returns the base64 lines of a PEM key: any one of them in a message is a leak.
func keyLines(key string) []string {
	var out []string
	for _, l := range strings.Split(key, "\n") {
		if len(l) >= 16 && !strings.HasPrefix(l, "-----") {
			out = append(out, l)
		}
	}
	return out
}

func TestNoKeyMaterialInErrorsOrLogs(t *testing.T) {
	tb := validTable(t)
	key := tb.Certificates[0].PrivateKeyPEM
	other := pairFor(t, "other.test")
	// Smuggle the key into every string field a violation could echo, and break the pair.
	tb.Revision = 9
	tb.Routes[0].Hostname = key
	tb.Routes[1].Targets[0].LeaseID = key
	tb.Routes[1].Targets[1].Address = key
	tb.Routes[1].TLS.CertificateID = key
	tb.Routes = append(tb.Routes, Route{Hostname: "z.test", Targets: tb.Routes[2].Targets, TLS: &RouteTLS{CertificateID: "cert-b"}})
	tb.Certificates = append(tb.Certificates,
		Certificate{ID: "cert-b", CertificatePEM: key, PrivateKeyPEM: key},
		Certificate{ID: key, CertificatePEM: other.cert, PrivateKeyPEM: key},
		Certificate{ID: "cert-d", CertificatePEM: other.cert, PrivateKeyPEM: other.key + key})

	log, logs := observed()
	dir := t.TempDir()
	s := NewStore(StoreOptions{Logger: log, StateDir: dir})
	err := s.Apply(tb)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("%v", err)
	}
	// The JSON path too: the key as an object key and as values of the wrong type.
	raw, _ := json.Marshal(map[string]any{"revision": 10, "routes": []any{map[string]any{"hostname": key}}, "certificates": key})
	jerr := s.ApplyJSON(raw)
	if !errors.Is(jerr, ErrInvalid) {
		t.Fatalf("%v", jerr)
	}
	// A corrupt state file holding the key.
	os.WriteFile(filepath.Join(dir, StateFile), []byte(`{"revision":1,"routes":[],"certificates":[{"id":"x","certificatePem":"","privateKeyPem":`+mustJSON(key)+`}]}`), 0o600)
	lerr := NewStore(StoreOptions{Logger: log, StateDir: dir}).LoadState()
	if lerr == nil {
		t.Fatal("a corrupt state file must be reported")
	}

	var texts []string
	texts = append(texts, err.Error(), jerr.Error(), lerr.Error(), fmt.Sprintf("%v %+v %#v", tb.Certificates, tb.Certificates[0], tb.Certificates[0]))
	for _, e := range logs.All() {
		texts = append(texts, e.Message)
		for k, v := range e.ContextMap() {
			texts = append(texts, k, fmt.Sprint(v))
		}
	}
	for _, text := range texts {
		if strings.Contains(text, "PRIVATE KEY-----") {
			t.Fatalf("a key header leaked: %s", text)
		}
		for _, l := range keyLines(key) {
			if strings.Contains(text, l) {
				t.Fatalf("key material leaked: %s", text)
			}
		}
	}
	if len(texts) < 10 {
		t.Fatalf("only %d texts checked", len(texts))
	}
}

// A relay may echo the registration bearer into a table, for instance as a key the schema
// does not allow: with StoreOptions.Redact set, the violations the store logs and returns
// show the marker in its place, from the relay and from the state file alike.
func TestRedactAppliesToViolations(t *testing.T) {
	const secret = "s3cr3t-echoed-BEARER"
	const marker = "[redacted]"
	redact := func(s string) string { return strings.ReplaceAll(s, secret, marker) }
	raw := []byte(`{"revision":3,"routes":[],"certificates":[],"` + secret + `":1}`)
	log, logs := observed()
	dir := t.TempDir()
	s := NewStore(StoreOptions{Logger: log, StateDir: dir, Redact: redact})
	err := s.ApplyJSON(raw)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("%v, want ErrInvalid", err)
	}
	if err := os.WriteFile(filepath.Join(dir, StateFile), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	lerr := NewStore(StoreOptions{Logger: log, StateDir: dir, Redact: redact}).LoadState()
	if lerr == nil {
		t.Fatal("a state file with an unknown key must be reported")
	}
	want := marker + " is not allowed"
	texts := []string{err.Error(), lerr.Error()}
	for _, v := range logs.FilterMessage("route table violation").All() {
		texts = append(texts, fmt.Sprint(v.ContextMap()["violation"]))
	}
	for _, v := range logs.FilterMessage("last-known-good route table ignored").All() {
		texts = append(texts, fmt.Sprint(v.ContextMap()["violations"]))
	}
	if len(texts) != 4 {
		t.Fatalf("checked %d texts, want the two errors and two log lines", len(texts))
	}
	for _, text := range texts {
		if !strings.Contains(text, want) {
			t.Errorf("%q does not hold %q", text, want)
		}
	}
	for _, e := range logs.All() {
		if line := e.Message + fmt.Sprint(e.ContextMap()); strings.Contains(line, secret) {
			t.Errorf("log line leaks the secret: %s", line)
		}
	}
}

package routetable

import (
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"testing"

	"github.com/serve-zone/ingress/internal/testcert"
	"github.com/serve-zone/ingress/stats"
)

// benchTable builds a valid table of n routes in groups of perGroup under one domain per
// group: a wildcard route per group and exact routes, two targets each. With certs, every
// group's routes are served with that group's certificate (covering "*.dK.bench.test").
func benchTable(tb testing.TB, n, perGroup int, certs []testPair) *Table {
	t := &Table{Revision: 1, Routes: make([]Route, 0, n)}
	groups := (n + perGroup - 1) / perGroup
	for g := 0; g < groups && len(t.Routes) < n; g++ {
		var rt *RouteTLS
		if certs != nil {
			id := fmt.Sprintf("cert-%05d", g)
			t.Certificates = append(t.Certificates, Certificate{ID: id, CertificatePEM: certs[g].cert, PrivateKeyPEM: certs[g].key})
			rt = &RouteTLS{CertificateID: id, RedirectHTTP: true}
		}
		domain := fmt.Sprintf("d%05d.bench.test", g)
		for i := 0; i < perGroup && len(t.Routes) < n; i++ {
			h := fmt.Sprintf("h%05d.%s", i, domain)
			if i == 0 {
				h = "*." + domain
			}
			a := fmt.Sprintf("127.%d.%d.%d", g/250%250, g%250, i%250+1)
			t.Routes = append(t.Routes, Route{Hostname: h, TLS: rt, Targets: []Target{
				{LeaseID: "lease-" + h[2:], Address: a, Port: 8080},
				{LeaseID: "lease-b-" + h[2:], Address: a, Port: 8081},
			}})
		}
	}
	sort.Slice(t.Routes, func(i, j int) bool { return t.Routes[i].Hostname < t.Routes[j].Hostname })
	return t
}

var (
	benchCertsOnce sync.Once
	benchCerts     []testPair
)

// certsForBench generates 1,000 group certificates once per test binary.
func certsForBench(tb testing.TB) []testPair {
	benchCertsOnce.Do(func() {
		for g := range 1000 {
			d := fmt.Sprintf("d%05d.bench.test", g)
			c, k, err := testcert.Generate("*."+d, d)
			if err != nil {
				tb.Fatal(err)
			}
			benchCerts = append(benchCerts, testPair{c, k})
		}
	})
	return benchCerts
}

func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{10, 10_000, 100_000} {
		s := NewStore(StoreOptions{})
		if err := s.Apply(benchTable(b, n, 10, nil)); err != nil {
			b.Fatal(err)
		}
		c := s.Load()
		last := (n - 1) / 10
		for _, tc := range []struct{ name, host, want string }{
			{"exact", fmt.Sprintf("h00003.d%05d.bench.test", last), fmt.Sprintf("h00003.d%05d.bench.test", last)},
			{"wildcard", fmt.Sprintf("www.d%05d.bench.test", last), fmt.Sprintf("*.d%05d.bench.test", last)},
			{"miss", "www.nothing.test", ""},
			{"raw-host", fmt.Sprintf("H00003.D%05d.Bench.Test.:443", last), fmt.Sprintf("h00003.d%05d.bench.test", last)},
		} {
			if got := hostOf(c.Lookup(tc.host)); got != tc.want {
				b.Fatalf("Lookup(%q) = %q, want %q", tc.host, got, tc.want)
			}
			b.Run(fmt.Sprintf("%s/routes=%d", tc.name, n), func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						s.Load().Lookup(tc.host)
					}
				})
			})
		}
	}
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// BenchmarkApply100k measures a full-size table: 100,000 routes (200,000 targets) and
// 1,000 certificates. "apply" is Store.Apply (validate, parse 1,000 key pairs, compile,
// swap; fresh store and stats registry each time); "decode" is the exact-schema decode of
// its JSON; "persist" is apply plus the atomic last-known-good write. Metrics: live-MB is
// the heap the applied table keeps alive, alloc-MB the bytes allocated per operation.
func BenchmarkApply100k(b *testing.B) {
	tb := benchTable(b, 100_000, 100, certsForBench(b))
	data, err := json.Marshal(tb)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("table JSON: %.1f MB", float64(len(data))/1e6)

	run := func(b *testing.B, op func() any) {
		var keep any
		base := heapInUse()
		alloc0 := totalAlloc()
		for b.Loop() {
			keep = op()
		}
		allocPerOp := float64(totalAlloc()-alloc0) / float64(b.N)
		live := heapInUse()
		runtime.KeepAlive(keep)
		b.ReportMetric(float64(int64(live)-int64(base))/1e6, "live-MB")
		b.ReportMetric(allocPerOp/1e6, "alloc-MB/op")
	}
	b.Run("decode", func(b *testing.B) {
		run(b, func() any {
			t, err := Decode(data, ModeRelay)
			if err != nil {
				b.Fatal(err)
			}
			return t
		})
	})
	b.Run("apply", func(b *testing.B) {
		run(b, func() any {
			s := NewStore(StoreOptions{Stats: stats.NewRegistry(stats.Options{})})
			if err := s.Apply(tb); err != nil {
				b.Fatal(err)
			}
			return s
		})
	})
	b.Run("decode+apply", func(b *testing.B) {
		run(b, func() any {
			s := NewStore(StoreOptions{Stats: stats.NewRegistry(stats.Options{})})
			if err := s.ApplyJSON(data); err != nil {
				b.Fatal(err)
			}
			return s
		})
	})
	b.Run("apply+persist", func(b *testing.B) {
		dir := b.TempDir()
		run(b, func() any {
			s := NewStore(StoreOptions{Stats: stats.NewRegistry(stats.Options{}), StateDir: dir})
			if err := s.Apply(tb); err != nil {
				b.Fatal(err)
			}
			return s
		})
	})
}

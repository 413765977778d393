package stats

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkRecord compares recording one request (requests, bytes in, bytes out) through
// a Host with the same through prometheus CounterVecs looked up by hostname, which is
// what a proxy without these counters would do per request. "inc" is the single
// CounterVec increment, for scale.
func BenchmarkRecord(b *testing.B) {
	r := NewRegistry(Options{})
	h := r.Host("api.example.test")
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bench_requests_total"}, []string{"hostname"})
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bench_bytes_total"}, []string{"hostname", "direction"})
	const host = "api.example.test"
	counterVec := func() {
		reqs.WithLabelValues(host).Inc()
		bytes.WithLabelValues(host, "in").Add(300)
		bytes.WithLabelValues(host, "out").Add(4000)
	}

	b.Run("host/serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h.Request(300, 4000)
		}
	})
	b.Run("host/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				h.Request(300, 4000)
			}
		})
	})
	b.Run("countervec/serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			counterVec()
		}
	})
	b.Run("countervec/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				counterVec()
			}
		})
	})
	b.Run("countervec-inc/serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			reqs.WithLabelValues(host).Inc()
		}
	})
	b.Run("countervec-inc/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				reqs.WithLabelValues(host).Inc()
			}
		})
	})

	// 64 hosts, each goroutine on its own: no two goroutines write one cache line, so the
	// per-op cost should stay near the serial one instead of collapsing under sharing.
	hosts := make([]*Host, 64)
	names := make([]string, 64)
	for i := range hosts {
		names[i] = fmt.Sprintf("h%02d.example.test", i)
		hosts[i] = r.Host(names[i])
	}
	var next atomic.Uint32
	b.Run("host/parallel-64-hosts", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			hh := hosts[next.Add(1)%64]
			for pb.Next() {
				hh.Request(300, 4000)
			}
		})
	})
	b.Run("countervec/parallel-64-hosts", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			n := names[next.Add(1)%64]
			for pb.Next() {
				reqs.WithLabelValues(n).Inc()
				bytes.WithLabelValues(n, "in").Add(300)
				bytes.WithLabelValues(n, "out").Add(4000)
			}
		})
	})
}

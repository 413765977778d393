package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminHandler serves /metrics, /healthz, /readyz and /v1/traffic-statistics. /readyz
// answers 503 with notReady's reason while it has one, and its body adds explain's lines
// (where the ACME routes stand; nil: none) after its verdict.
func adminHandler(reg *prometheus.Registry, notReady func() string, explain func() []string, statistics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		body := "ready\n"
		if why := notReady(); why != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			body = "not ready: " + why + "\n"
		}
		if explain != nil {
			for _, l := range explain() {
				body += l + "\n"
			}
		}
		_, _ = w.Write([]byte(body))
	})
	mux.Handle("/v1/traffic-statistics", statistics)
	return mux
}

// newMetricsRegistry returns a registry with the Go runtime and process collectors and cs.
func newMetricsRegistry(cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	all := append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, cs...)
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

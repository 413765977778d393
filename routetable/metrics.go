package routetable

import "github.com/prometheus/client_golang/prometheus"

// Collectors returns the store's Prometheus collectors. They read the store's atomics at
// scrape time, so applying a table costs the metrics nothing. Register them once.
func (s *Store) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ingress_route_table_revision",
			Help: "Revision of the route table being served; -1 while none is applied.",
		}, func() float64 { return float64(s.applied.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ingress_route_table_routes",
			Help: "Routes in the route table being served.",
		}, func() float64 { return float64(s.routes.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ingress_route_table_certificates_expired",
			Help: "Certificates of the route table being served whose leaf is outside its validity window (served anyway).",
		}, func() float64 { return float64(s.expired.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ingress_route_table_applies_total",
			Help: "Route tables applied.",
		}, func() float64 { return float64(s.applies.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ingress_route_table_refusals_total",
			Help: "Route tables refused as invalid (each refused revision counts once).",
		}, func() float64 { return float64(s.refusals.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ingress_route_table_persist_failures_total",
			Help: "Applied route tables that could not be written to the state directory.",
		}, func() float64 { return float64(s.persistFailures.Load()) }),
	}
}

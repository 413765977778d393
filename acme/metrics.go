package acme

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the manager's counters; the gauges are computed at scrape time from Status.
type metrics struct {
	failures map[string]*atomic.Uint64 // by kind; fixed keys, read without a lock
	new, ren atomic.Uint64
}

func newMetrics() *metrics {
	m := &metrics{failures: map[string]*atomic.Uint64{}}
	for _, k := range failureKinds {
		m.failures[k] = new(atomic.Uint64)
	}
	return m
}

func (m *metrics) failure(kind string) {
	c := m.failures[kind]
	if c == nil {
		c = m.failures[KindOther]
	}
	c.Add(1)
}

func (m *metrics) obtained(renewal bool) {
	if renewal {
		m.ren.Add(1)
	} else {
		m.new.Add(1)
	}
}

// Collector returns the manager's Prometheus collector. Register it once.
//
//	ingress_acme_certificates{state}            ACME hostnames by state: valid, missing, expired
//	ingress_acme_next_renewal_timestamp_seconds earliest start of a renewal window (0: none)
//	ingress_acme_expiry_timestamp_seconds       earliest end of a certificate's validity (0: none)
//	ingress_acme_obtained_total{kind}           certificates obtained: new, renewal
//	ingress_acme_failures_total{kind}           failed attempts by kind (see the Kind constants)
//	ingress_acme_storage_up                     1 while the shared store answers, else 0 (with --acme-storage)
//	ingress_acme_storage_failures_total         failed round trips to the shared store (with --acme-storage)
func (m *Manager) Collector() prometheus.Collector { return collector{m} }

type collector struct{ m *Manager }

var (
	descCerts = prometheus.NewDesc("ingress_acme_certificates",
		"ACME hostnames of the route table by the state of their certificate: valid, missing (not obtained yet, or a wildcard that cannot be), expired (served anyway).",
		[]string{"state"}, nil)
	descRenewal = prometheus.NewDesc("ingress_acme_next_renewal_timestamp_seconds",
		"Earliest time (Unix seconds) a managed certificate enters its renewal window by its lifetime (the CA's renewal information may move it earlier); 0 without certificates.",
		nil, nil)
	descExpiry = prometheus.NewDesc("ingress_acme_expiry_timestamp_seconds",
		"Earliest end of validity (Unix seconds) of a managed certificate; 0 without certificates.",
		nil, nil)
	descObtained = prometheus.NewDesc("ingress_acme_obtained_total",
		"Certificates obtained from the ACME CA: new ones and renewals.",
		[]string{"kind"}, nil)
	descFailures = prometheus.NewDesc("ingress_acme_failures_total",
		"Failed attempts to obtain or renew a certificate, by kind: ca_unreachable, challenge, rate_limited, terms, ca_refused, other.",
		[]string{"kind"}, nil)
	descStoreUp = prometheus.NewDesc("ingress_acme_storage_up",
		"1 while the shared certificate store (--acme-storage) answers, 0 while it does not (the certificates held are served; orders and renewals wait).",
		nil, nil)
	descStoreFailures = prometheus.NewDesc("ingress_acme_storage_failures_total",
		"Failed round trips to the shared certificate store (--acme-storage): no answer, or an error answer.",
		nil, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCerts, descRenewal, descExpiry, descObtained, descFailures} {
		ch <- d
	}
	if c.m.health != nil {
		ch <- descStoreUp
		ch <- descStoreFailures
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	now := time.Now()
	var valid, missing, expired int
	var renew, expiry time.Time
	for _, h := range m.Status() {
		switch {
		case !h.HasCertificate():
			missing++
			continue
		case now.After(h.NotAfter):
			expired++
		default:
			valid++
		}
		if renew.IsZero() || h.RenewAt.Before(renew) {
			renew = h.RenewAt
		}
		if expiry.IsZero() || h.NotAfter.Before(expiry) {
			expiry = h.NotAfter
		}
	}
	ch <- prometheus.MustNewConstMetric(descCerts, prometheus.GaugeValue, float64(valid), "valid")
	ch <- prometheus.MustNewConstMetric(descCerts, prometheus.GaugeValue, float64(missing), "missing")
	ch <- prometheus.MustNewConstMetric(descCerts, prometheus.GaugeValue, float64(expired), "expired")
	ch <- prometheus.MustNewConstMetric(descRenewal, prometheus.GaugeValue, unixOrZero(renew))
	ch <- prometheus.MustNewConstMetric(descExpiry, prometheus.GaugeValue, unixOrZero(expiry))
	ch <- prometheus.MustNewConstMetric(descObtained, prometheus.CounterValue, float64(m.metrics.new.Load()), "new")
	ch <- prometheus.MustNewConstMetric(descObtained, prometheus.CounterValue, float64(m.metrics.ren.Load()), "renewal")
	for _, k := range failureKinds {
		ch <- prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, float64(m.metrics.failures[k].Load()), k)
	}
	if h := m.health; h != nil {
		up := 1.0
		if h.isDown() {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(descStoreUp, prometheus.GaugeValue, up)
		ch <- prometheus.MustNewConstMetric(descStoreFailures, prometheus.CounterValue, float64(h.failures.Load()))
	}
}

func unixOrZero(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

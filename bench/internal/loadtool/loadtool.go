// Package loadtool holds what the benchmark's load tools share: the loopback-only address
// rule, reading the CA they trust, the summary they print, whose format bench/compare
// parses (parse_hs), so it is defined once here, and a throwaway certificate for their
// tests' own servers (SelfSigned).
package loadtool

import (
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"
)

// CheckLoopback refuses an address whose host is not a loopback IP: the tools only ever
// load this machine's own listeners. tool prefixes the error.
func CheckLoopback(tool, addr string) error {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s: %q is not a loopback address", tool, addr)
	}
	return nil
}

// ReadCA returns a pool holding the PEM certificates of file; a file with none is an error.
func ReadCA(tool, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate in %s", tool, file)
	}
	return roots, nil
}

// Summary is one measurement as a tool reports it.
type Summary struct {
	Latencies []time.Duration // of the successful operations, any order (sorted in place)
	Failed    int
	Elapsed   time.Duration
	RateUnit  string   // "conn/s", "req/s"
	Extra     []string // lines printed after the latency line ("tls: …")
	FirstErr  error
}

// Write prints s in the format bench/compare reads.
func Write(w io.Writer, s Summary) {
	all := s.Latencies
	slices.Sort(all)
	secs := s.Elapsed.Seconds()
	fmt.Fprintf(w, "connections: %d ok, %d failed in %.2f s\n", len(all), s.Failed, secs)
	fmt.Fprintf(w, "rate: %.2f %s\n", float64(len(all))/secs, s.RateUnit)
	fmt.Fprintf(w, "latency ms: p50 %.3f p99 %.3f mean %.3f\n", ms(Percentile(all, 0.50)), ms(Percentile(all, 0.99)), ms(Mean(all)))
	for _, line := range s.Extra {
		fmt.Fprintln(w, line)
	}
	if s.FirstErr != nil {
		fmt.Fprintf(w, "first error: %v\n", s.FirstErr)
	}
}

// Percentile returns the p-quantile (0…1) of sorted, 0 when it is empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1))]
}

// Mean returns the mean of d, 0 when it is empty.
func Mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	return sum / time.Duration(len(d))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

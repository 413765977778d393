package reliability

// Reading the binary's /metrics: goroutines, memory and the counters the tests assert.

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testwait"
)

// metrics is one scrape: series ("name{labels}") to value.
type metrics map[string]float64

// scrape reads /metrics from the admin listener.
func scrape(t *testing.T, admin string) metrics {
	t.Helper()
	m, err := tryScrape(admin)
	if err != nil {
		t.Fatalf("scrape %s: %v", admin, err)
	}
	return m
}

var adminClient = &http.Client{Timeout: waitLimit, Transport: &http.Transport{DisableKeepAlives: true}}

func tryScrape(admin string) (metrics, error) {
	resp, err := adminClient.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	return parseMetrics(string(b)), nil
}

// parseMetrics reads the Prometheus text format's sample lines.
func parseMetrics(text string) metrics {
	m := metrics{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m
}

// get returns the value of one series, exactly as exposed ("name" or `name{k="v"}`); 0 when
// absent.
func (m metrics) get(series string) float64 { return m[series] }

// sum adds every series of family name whose labels contain each of the given `k="v"`.
func (m metrics) sum(name string, labels ...string) float64 {
	total := 0.0
	for s, v := range m {
		fam, rest, _ := strings.Cut(s, "{")
		if fam != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// failures returns ingress_backend_failures_total by kind.
func (m metrics) failures() map[string]float64 {
	out := map[string]float64{}
	for _, k := range []string{"connect", "handshake", "request"} {
		out[k] = m.sum("ingress_backend_failures_total", `kind="`+k+`"`)
	}
	return out
}

// usage is what the tests watch of the binary's resources.
type usage struct {
	goroutines float64
	rss        float64 // bytes
	heap       float64 // heap in use, bytes
}

func (u usage) String() string {
	return fmt.Sprintf("%0.f goroutines, RSS %.1f MiB, heap in use %.1f MiB", u.goroutines, u.rss/(1<<20), u.heap/(1<<20))
}

func (m metrics) usage() usage {
	return usage{
		goroutines: m.get("go_goroutines"),
		rss:        m.get("process_resident_memory_bytes"),
		heap:       m.get("go_memstats_heap_inuse_bytes"),
	}
}

// settle waits until the binary's goroutines are back to within slack of base and its heap
// in use within heapSlack bytes of base's, and returns the usage it saw last. The Go
// runtime frees at its next collection, which an idle binary may not start for minutes:
// each poll scrapes /metrics a few times, whose garbage brings one on. It fails the test
// after limit.
func settle(t *testing.T, admin string, base usage, slack float64, heapSlack float64, limit time.Duration) usage {
	t.Helper()
	var u usage
	testwait.UntilWhy(t, limit, "the baseline", func() (bool, string) {
		for range 20 {
			scrape(t, admin) // about 100 KB of garbage each
		}
		u = scrape(t, admin).usage()
		return u.goroutines <= base.goroutines+slack && u.heap <= base.heap+heapSlack,
			fmt.Sprintf("%s, baseline %s (slack %.0f goroutines, %.1f MiB heap)", u, base, slack, heapSlack/(1<<20))
	})
	return u
}

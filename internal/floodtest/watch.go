package floodtest

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Usage is one sample of a server's resources; a figure it could not read is -1.
type Usage struct {
	At time.Time
	// Heap (go_memstats_heap_inuse_bytes), Goroutines (go_goroutines), Abuse (the
	// ingress's ingress_client_abuse_total: verdicts of abuse so far) and Conns (its
	// ingress_open_connections, summed over protocols) come from the server's Prometheus
	// /metrics, whose answer was read at Read; Err is set when that scrape failed.
	Heap, Goroutines, Abuse, Conns float64
	Read                           time.Time
	Err                            error
	// RSS (VmRSS, bytes) and FDs (open descriptors) come from /proc, summed over the
	// watched processes, and CPU, their CPU time so far (user and system).
	RSS, FDs int64
	CPU      time.Duration
}

func (u Usage) String() string {
	mib := func(v float64) string {
		if v < 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	}
	return fmt.Sprintf("heap %s, %.0f goroutines, RSS %s, %d descriptors", mib(u.Heap), u.Goroutines, mib(float64(u.RSS)), u.FDs)
}

// Target is what Watch samples: a /metrics URL (empty: none) and a process (0: none), with
// its whole process group when Group is set and PID leads one (nginx's master and worker).
type Target struct {
	MetricsURL string
	PID        int
	Group      bool
	// ScrapeTimeout bounds one /metrics request (default 2s): a slower answer is a failed
	// sample.
	ScrapeTimeout time.Duration
}

// Watcher samples a Target until its ctx ends.
type Watcher struct {
	hasPID  bool // CPU is sampled
	mu      sync.Mutex
	samples []Usage
	done    chan struct{}
}

// Watch samples tg every period until ctx ends; Wait returns once it stopped.
func Watch(ctx context.Context, period time.Duration, tg Target) *Watcher {
	w := &Watcher{hasPID: tg.PID > 0, done: make(chan struct{})}
	if tg.ScrapeTimeout <= 0 {
		tg.ScrapeTimeout = 2 * time.Second
	}
	client := &http.Client{Timeout: tg.ScrapeTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			u := sampleOnce(ctx, client, tg)
			w.mu.Lock()
			w.samples = append(w.samples, u)
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// Wait returns once the watcher stopped.
func (w *Watcher) Wait() { <-w.done }

// Peak is the largest of each figure over the samples taken in [from, to], with the
// number of samples and of failed scrapes among them.
func (w *Watcher) Peak(from, to time.Time) (peak Usage, n, failed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	peak = Usage{Heap: -1, Goroutines: -1, RSS: -1, FDs: -1}
	for _, u := range w.samples {
		if u.At.Before(from) || u.At.After(to) {
			continue
		}
		n++
		if u.Err != nil {
			failed++
			if peak.Err == nil {
				peak.Err = u.Err
			}
		}
		peak.Heap, peak.Goroutines = max(peak.Heap, u.Heap), max(peak.Goroutines, u.Goroutines)
		peak.RSS, peak.FDs = max(peak.RSS, u.RSS), max(peak.FDs, u.FDs)
	}
	return peak, n, failed
}

func sampleOnce(ctx context.Context, client *http.Client, tg Target) Usage {
	u := Usage{At: time.Now(), Heap: -1, Goroutines: -1, Abuse: -1, Conns: -1, RSS: -1, FDs: -1}
	if tg.MetricsURL != "" {
		u.Err = scrape(ctx, client, tg.MetricsURL, &u)
		u.Read = time.Now()
	}
	if tg.PID > 0 {
		pids := []int{tg.PID}
		if tg.Group {
			if g := groupPIDs(tg.PID); len(g) > 0 {
				pids = g
			}
		}
		u.RSS, u.FDs = 0, 0
		for _, p := range pids {
			u.RSS += vmRSS(p)
			u.CPU += cpuTime(p)
			if ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(p), "fd")); err == nil {
				u.FDs += int64(len(ents))
			}
		}
	}
	return u
}

// scrape reads go_memstats_heap_inuse_bytes, go_goroutines and (left -1 when absent)
// ingress_client_abuse_total and ingress_open_connections from a Prometheus text page
// into u.
func scrape(ctx context.Context, client *http.Client, url string, u *Usage) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch {
		case name == "go_memstats_heap_inuse_bytes":
			u.Heap, _ = strconv.ParseFloat(val, 64)
		case name == "go_goroutines":
			u.Goroutines, _ = strconv.ParseFloat(val, 64)
		case name == "ingress_client_abuse_total":
			u.Abuse, _ = strconv.ParseFloat(val, 64)
		case strings.HasPrefix(name, "ingress_open_connections{"):
			if v, err := strconv.ParseFloat(val, 64); err == nil {
				u.Conns = max(u.Conns, 0) + v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if u.Heap < 0 || u.Goroutines < 0 {
		return fmt.Errorf("/metrics: go_memstats_heap_inuse_bytes or go_goroutines missing")
	}
	return nil
}

// ConnsBefore is the Conns of the last sample taken before t (-1: none has it).
func (w *Watcher) ConnsBefore(t time.Time) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := -1.0
	for _, u := range w.samples {
		if u.At.Before(t) && u.Conns >= 0 {
			n = u.Conns
		}
	}
	return n
}

// ConnsDownTo is when the server was first seen holding at most n connections among the
// samples taken from from on: the time that sample's answer was read, which is no
// earlier than the moment it counted (zero: not seen yet).
func (w *Watcher) ConnsDownTo(from time.Time, n float64) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, u := range w.samples {
		if !u.At.Before(from) && u.Conns >= 0 && u.Conns <= n {
			return u.Read
		}
	}
	return time.Time{}
}

// Sampled reports whether a sample was taken at or after t.
func (w *Watcher) Sampled(t time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.samples) > 0 && !w.samples[len(w.samples)-1].At.Before(t)
}

// FirstAbuse is the time of the first sample after from whose Abuse count is above the
// last one before from: when the server's verdict was seen, up to a period late (zero:
// never, or no Abuse figure).
func (w *Watcher) FirstAbuse(from time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	base := 0.0
	for _, u := range w.samples {
		if u.Abuse < 0 {
			continue
		}
		if u.At.Before(from) {
			base = u.Abuse
			continue
		}
		if u.Abuse > base {
			return u.At
		}
	}
	return time.Time{}
}

// vmRSS is a process's VmRSS in bytes (0 when unreadable).
func vmRSS(pid int) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// clockTick is the unit of /proc/PID/stat's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// cpuTime is a process's user and system CPU time (0 when unreadable).
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// After the command's ") ": state is field 3 of the line, utime and stime 14 and 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	user, _ := strconv.ParseInt(f[11], 10, 64)
	sys, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(user+sys) * clockTick
}

// CPUShare is the watched processes' CPU use between the samples nearest after from and
// nearest before to, in cores (1.0: one core busy); -1 without two such samples or
// without a process to watch.
func (w *Watcher) CPUShare(from, to time.Time) float64 {
	if !w.hasPID {
		return -1
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var first, last *Usage
	for i := range w.samples {
		u := &w.samples[i]
		if u.At.Before(from) || u.At.After(to) {
			continue
		}
		if first == nil {
			first = u
		}
		last = u
	}
	if first == nil || last == first || last.At.Sub(first.At) <= 0 {
		return -1
	}
	return float64(last.CPU-first.CPU) / float64(last.At.Sub(first.At))
}

// groupPIDs lists the processes whose process group is pgid.
func groupPIDs(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command (which may hold spaces) end with ") ": state, ppid, pgrp.
		i := strings.LastIndexByte(string(b), ')')
		if f := strings.Fields(string(b[i+1:])); len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

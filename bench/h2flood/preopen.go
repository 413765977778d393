package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/serve-zone/ingress/internal/floodtest"
)

// The -preopen mode (issue 25): the attacker (a child process: this program again, told
// by attackerEnv) opens -preopen connections from -from first, over -over (h2c to
// -h2c-addr, or h2 over TLS to -tls-addr), then sends HEADERS and RST_STREAM for
// GET -flood-path on all of them for -d, each redialling when the server ends it. Two
// bystanders from the default source address send GET -path back to back (1 ms apart)
// the whole time: HTTP/1.1 keep-alive to -addr and HTTP/2 over TLS to -tls-addr. Their
// quiet window is the -quiet before the attacker starts; their flood window is the flood
// itself (after the pre-open).
//
// The attacker floods at niceness -attacker-nice (10): it shares a core with the
// bystanders and the target, and niced it takes what they leave (nearly all of the core)
// rather than an equal share, so that the bystanders' latency measures the server, not
// their wait for the core the attacker floods from, as with an attacker on a machine of
// its own. It opens its connections (setup) at an equal share.
//
// The server is watched every 250 ms: heap in use and goroutines from -metrics (a
// Prometheus page; the ingress's /metrics), RSS and descriptors from /proc for -pid's
// process group (nginx's master and worker). The target's counters (bench/target's
// /_counts at -target-counts) say how many flooding requests reached it and how many
// connections it had to accept.

// attackerEnv carries the attack to the child process.
const attackerEnv = "H2FLOOD_PREOPEN_ATTACKER"

// preopenConfig are the -preopen mode's flags.
type preopenConfig struct {
	conns                       int
	over                        string // h2c or tls
	h2cAddr, tlsAddr, sni       string
	floodPath                   string
	quiet                       time.Duration
	targetCounts, metrics, name string
	pid, targetPID, nice        int
}

func (p *preopenConfig) check(c config) error {
	if p.conns <= 0 {
		return nil
	}
	if p.over != "h2c" && p.over != "tls" {
		return fmt.Errorf("-over must be h2c or tls, not %q", p.over)
	}
	if p.tlsAddr == "" {
		return fmt.Errorf("-preopen needs -tls-addr (the HTTP/2 bystander goes over TLS)")
	}
	if c.from == "" {
		return fmt.Errorf("-preopen needs -from: from the bystanders' address they would be penalised with the attacker")
	}
	if p.quiet <= 0 {
		return fmt.Errorf("-quiet must be positive")
	}
	return nil
}

// readCounts reads bench/target's /_counts (reset: restart its peak of open
// connections).
func readCounts(url string, reset bool) (map[string]int64, error) {
	if url == "" {
		return nil, nil
	}
	if reset {
		url += "?reset"
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if n, err := strconv.ParseInt(v, 10, 64); ok && err == nil {
			m[k] = n
		}
	}
	return m, sc.Err()
}

// runPreopen runs the -preopen measurement and prints it, ending with one tab-separated
// "row" line for bench/flood.sh's table.
func runPreopen(out io.Writer, c config, p preopenConfig) error {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	h1 := &http.Transport{MaxIdleConnsPerHost: 1}
	h2 := &http.Transport{
		ForceAttemptHTTP2: true,
		TLSClientConfig:   &tls.Config{ServerName: p.sni, InsecureSkipVerify: true},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, p.tlsAddr)
		},
	}
	defer h1.CloseIdleConnections()
	defer h2.CloseIdleConnections()
	b1 := floodtest.Probe(ctx, time.Millisecond, floodtest.Bystander(h1, "http://"+c.addr+c.path, c.host, 1))
	b2 := floodtest.Probe(ctx, time.Millisecond, floodtest.Bystander(h2, "https://"+p.sni+c.path, c.host, 2))
	w := floodtest.Watch(ctx, 250*time.Millisecond, floodtest.Target{MetricsURL: p.metrics, PID: p.pid, Group: true})
	tw := floodtest.Watch(ctx, 250*time.Millisecond, floodtest.Target{PID: p.targetPID, Group: true})
	defer func() { stop(); b1.Wait(); b2.Wait(); w.Wait(); tw.Wait() }()

	quietFrom := time.Now()
	time.Sleep(p.quiet) // the quiet window: the bystanders alone
	launched := time.Now()
	before, err := readCounts(p.targetCounts, true)
	if err != nil {
		return fmt.Errorf("target counts: %v", err)
	}
	a := floodtest.Attack{Addr: p.h2cAddr, From: net.ParseIP(c.from), Conns: p.conns, OpenLimit: 10 * time.Second,
		Host: c.host, Path: p.floodPath, Duration: c.duration, FloodNice: p.nice}
	if p.over == "tls" {
		a.Addr, a.SNI = p.tlsAddr, p.sni
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	res, err := floodtest.RunInChild(ctx, exe, attackerEnv, a)
	if err != nil {
		return err
	}
	after, err := readCounts(p.targetCounts, false)
	if err != nil {
		return fmt.Errorf("target counts: %v", err)
	}
	// The server's peak is read until a second after the flood (it may peak while it
	// tears the attacker's connections down).
	for settled := res.End.Add(time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, n, _ := w.Peak(settled, time.Now()); n > 0 {
			break
		}
	}
	peak, samples, failed := w.Peak(launched, res.End.Add(time.Second))
	q1, q2 := b1.Window(quietFrom, launched), b2.Window(quietFrom, launched)
	d1, d2 := b1.Window(res.Start, res.End), b2.Window(res.Start, res.End)

	fmt.Fprintf(out, "preopen: %s, %d connections over %s from %s, %s flood\n", p.name, p.conns, p.over, c.from, c.duration)
	// The verdict: the first GOAWAY ENHANCE_YOUR_CALM the attacker read, or the first
	// sample of the server's verdict count above its count before the flood (the
	// ingress; up to 250 ms late), whichever came first. A verdict can end the
	// connections without a GOAWAY the attacker reads.
	verdict := floodtest.Earliest(res.Verdict, w.FirstAbuse(launched))
	fmt.Fprintln(out, res.Describe(p.conns, verdict))
	fmt.Fprintf(out, "target: %d flooding requests, %d connections opened, at most %d open at once\n",
		after["flood"]-before["flood"], after["connections_opened"]-before["connections_opened"], after["peak_open"])
	cpu, targetCPU := w.CPUShare(res.Start, res.End), tw.CPUShare(res.Start, res.End)
	fmt.Fprintf(out, "server peak: %s (%d samples, %d /metrics scrapes failed); CPU during the flood: server %s, target %s\n",
		peak, samples, failed, percent(cpu), percent(targetCPU))
	fmt.Fprintf(out, "bystander HTTP/1.1: quiet %s | flood %s\n", q1, d1)
	fmt.Fprintf(out, "bystander HTTP/2:   quiet %s | flood %s\n", q2, d2)

	secs := func(d time.Duration, ok bool) string {
		if !ok {
			return "-"
		}
		return fmt.Sprintf("%.2f", d.Seconds())
	}
	var gone time.Duration
	var goneOK bool
	if !verdict.IsZero() {
		gone, goneOK = res.GoneAfter(verdict)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
	mib := func(v float64) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", v/(1<<20))
	}
	num := func(v float64) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", v)
	}
	fmt.Fprintln(out, strings.Join([]string{"row", p.name, p.over, strconv.Itoa(p.conns), strconv.Itoa(res.Opened),
		strconv.FormatInt(res.Streams, 10), strconv.FormatInt(after["flood"]-before["flood"], 10),
		strconv.FormatInt(after["connections_opened"]-before["connections_opened"], 10), strconv.FormatInt(after["peak_open"], 10),
		secs(verdict.Sub(res.Start), !verdict.IsZero()), secs(gone, goneOK),
		secs(res.PreopenedGone.Sub(res.Start), !res.PreopenedGone.IsZero()),
		mib(peak.Heap), mib(float64(peak.RSS)), num(peak.Goroutines), num(float64(peak.FDs)), strconv.Itoa(failed),
		ms(q1.P99), ms(d1.P99), strconv.Itoa(d1.Failed), ms(q2.P99), ms(d2.P99), strconv.Itoa(d2.Failed),
		percent(cpu), percent(targetCPU)}, "\t"))
	return nil
}

// percent is a CPU share in % of one core ("-" when unknown).
func percent(cores float64) string {
	if cores < 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*cores)
}

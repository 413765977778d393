// Command starttime measures how long the real ingress binary takes from process start to
// its first /readyz 200, and its peak resident memory (VmHWM of /proc/PID/status, Linux)
// at that moment and again after a settling time (work deferred past readiness shows
// there). It runs the binary -runs times, one after the other, each stopped with SIGTERM,
// and prints each run and the minimum and median of each figure (bench/README.md, "Start
// time").
//
// The admin listener is put on a free loopback port (--admin-addr is appended to the
// arguments); everything after -- is passed to the binary:
//
//	go run ./bench/starttime -bin ./ingress -runs 7 -- --routes /tmp/big.json \
//	  --http-addr 127.0.0.1:0 --https-addr 127.0.0.1:0 --http3=false --log-level warn
//
// Only the standard library is used.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	bin := flag.String("bin", "", "the ingress binary")
	runs := flag.Int("runs", 7, "number of runs")
	settle := flag.Duration("settle", 2*time.Second, "how long after ready to read VmHWM again")
	limit := flag.Duration("timeout", 60*time.Second, "longest wait for /readyz 200 per run")
	flag.Parse()
	if *bin == "" || *runs < 1 {
		log.Fatal("starttime: -bin is required and -runs must be at least 1")
	}
	var all []result
	for i := 0; i < *runs; i++ {
		r, err := measure(context.Background(), *bin, flag.Args(), *settle, *limit, os.Stderr)
		for retry := 0; errors.Is(err, errPortTaken) && retry < 3; retry++ {
			r, err = measure(context.Background(), *bin, flag.Args(), *settle, *limit, os.Stderr)
		}
		if err != nil {
			log.Fatalf("starttime: run %d: %v", i+1, err)
		}
		fmt.Printf("run %d: ready %7.1f ms (CPU %6.0f ms)  VmHWM at ready %6.1f MiB  after %s %6.1f MiB  VmRSS then %6.1f MiB\n",
			i+1, ms(r.ready), ms(r.cpuReady), mib(r.hwmReady), *settle, mib(r.hwmSettled), mib(r.rssSettled))
		all = append(all, r)
	}
	fmt.Print(summary(all))
}

// result is one run's figures; memory in bytes.
type result struct {
	ready, cpuReady                  time.Duration // wall time; CPU time (user+system) of the process
	hwmReady, hwmSettled, rssSettled int64
}

// summary prints the minimum and median of each figure.
func summary(rs []result) string {
	col := func(f func(result) float64) (lo, med float64) {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[0], median(v)
	}
	var b strings.Builder
	lo, med := col(func(r result) float64 { return ms(r.ready) })
	fmt.Fprintf(&b, "ready (ms):             min %7.1f  median %7.1f  (%d runs)\n", lo, med, len(rs))
	lo, med = col(func(r result) float64 { return ms(r.cpuReady) })
	fmt.Fprintf(&b, "CPU until ready (ms):   min %7.1f  median %7.1f\n", lo, med)
	lo, med = col(func(r result) float64 { return mib(r.hwmReady) })
	fmt.Fprintf(&b, "VmHWM at ready (MiB):   min %7.1f  median %7.1f\n", lo, med)
	lo, med = col(func(r result) float64 { return mib(r.hwmSettled) })
	fmt.Fprintf(&b, "VmHWM settled (MiB):    min %7.1f  median %7.1f\n", lo, med)
	return b.String()
}

// median of sorted values.
func median(v []float64) float64 {
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func mib(b int64) float64        { return float64(b) / (1 << 20) }

// measure starts bin with args and --admin-addr on a free loopback port, polls /readyz
// every millisecond until it answers 200, reads the memory figures, then stops the
// process with SIGTERM (SIGKILL if it has not exited 10 s later). The binary's output
// goes to out.
func measure(ctx context.Context, bin string, args []string, settle, limit time.Duration, out io.Writer) (result, error) {
	admin, err := freePort()
	if err != nil {
		return result{}, err
	}
	cmd := exec.CommandContext(ctx, bin, append(slices.Clone(args), "--admin-addr", admin)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 10 * time.Second
	exited := make(chan error, 1)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	go func() { exited <- cmd.Wait() }()
	defer func() {
		select {
		case <-exited:
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := start.Add(limit)
	var r result
	for {
		if ok := readyz(client, admin); ok {
			r.ready = time.Since(start)
			break
		}
		select {
		case err := <-exited:
			exited <- err // for the deferred stop
			return result{}, fmt.Errorf("the binary exited before it was ready: %v", err)
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			return result{}, fmt.Errorf("not ready within %s", limit)
		}
	}
	pid := cmd.Process.Pid
	if r.cpuReady, err = cpuTime(pid); err != nil {
		return result{}, err
	}
	if r.hwmReady, _, err = memory(pid); err != nil {
		return result{}, err
	}
	select {
	case err := <-exited:
		exited <- err
		// What answered was another process, which took the free port first: the
		// binary could not bind it (exit status 2). The run is repeated.
		return result{}, fmt.Errorf("%w: the binary exited after /readyz answered: %v", errPortTaken, err)
	case <-time.After(settle):
	}
	if r.hwmSettled, r.rssSettled, err = memory(pid); err != nil {
		return result{}, err
	}
	return r, nil
}

// errPortTaken marks a run whose admin port another process took between freePort and
// the binary's bind.
var errPortTaken = errors.New("the admin port was taken")

// readyz reports whether /readyz answered 200.
func readyz(c *http.Client, admin string) bool {
	res, err := c.Get("http://" + admin + "/readyz")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// memory returns VmHWM (peak resident set) and VmRSS of pid, in bytes.
func memory(pid int) (hwm, rss int64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || (name != "VmHWM" && name != "VmRSS") {
			continue
		}
		f := strings.Fields(val) // "123456 kB"
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("/proc/%d/status: unexpected %s line %q", pid, name, line)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if name == "VmHWM" {
			hwm = n << 10
		} else {
			rss = n << 10
		}
	}
	if hwm == 0 || rss == 0 {
		return 0, 0, errors.New("no VmHWM or VmRSS in /proc/" + strconv.Itoa(pid) + "/status")
	}
	return hwm, rss, nil
}

// clockTick is Linux's USER_HZ, the unit of /proc/PID/stat's CPU times (100 on every
// Linux ABI Go supports).
const clockTick = 10 * time.Millisecond

// cpuTime returns the user and system CPU time pid has used, all its threads together.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after its ')' are fixed:
	// state is field 3, utime field 14, stime field 15.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// freePort returns a loopback "127.0.0.1:port" that was free a moment ago.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

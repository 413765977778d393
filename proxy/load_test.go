package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSwapUnderLoad(t *testing.T) {
	e := newEnv(t)
	b1 := backend(t, echoInfo())
	b2 := backend(t, echoInfo())
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{b1}}})
	stop := make(chan struct{})
	var swaps sync.WaitGroup
	swaps.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			bs := []string{b1}
			switch i % 3 {
			case 1:
				bs = []string{b2}
			case 2:
				bs = []string{b1, b2}
			}
			e.apply([]routeSpec{{host: "app.example.test", backends: bs}, {host: fmt.Sprintf("x%d.example.test", i), backends: bs}})
		}
	})
	const workers, perWorker = 16, 150
	var errs collect
	var ok atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		c := e.h1Client()
		if w%2 == 1 {
			c = e.h2cClient()
		}
		wg.Go(func() {
			for range perWorker {
				res, err := c.Get("http://app.example.test/")
				if err != nil {
					errs.add(err)
					continue
				}
				body, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil || res.StatusCode != 200 || string(body) != "hello from app.example.test" {
					errs.add(fmt.Errorf("status %d body %q err %v", res.StatusCode, body, err))
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	swaps.Wait()
	errs.check(t)
	if ok.Load() != workers*perWorker {
		t.Errorf("%d of %d requests succeeded", ok.Load(), workers*perWorker)
	}
	e.waitRequests("app.example.test", workers*perWorker)
	if st := e.stat("app.example.test"); st.Requests != workers*perWorker {
		t.Errorf("requests counted %d", st.Requests)
	}
}

func TestShutdownDrainsInFlight(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	var started atomic.Int64
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		<-release
		io.WriteString(w, "done")
	}))
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
	const n = 24
	var errs collect
	var wg sync.WaitGroup
	for i := range n {
		c := e.h1Client()
		if i%2 == 1 {
			c = e.h2cClient()
		}
		wg.Go(func() {
			res, err := c.Get("http://app.example.test/slow")
			if err != nil {
				errs.add(err)
				return
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || string(b) != "done" {
				errs.add(fmt.Errorf("body %q: %v", b, err))
			}
		})
	}
	waitFor(t, "all requests in flight", func() bool { return started.Load() == n })
	shut := shutdownInBackground(t, e, 10*time.Second)
	waitFor(t, "the listeners closed by Shutdown", func() bool {
		c, err := net.Dial("tcp", e.http)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(release)
	wg.Wait()
	waitShutdown(t, shut, 10*time.Second)
	errs.check(t)
	e.waitServed(t)
}

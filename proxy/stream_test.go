package proxy

import (
	"io"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestStreamingIsFlat moves 1 GiB up and 1 GiB down through the proxy and checks
// that the heap stays small: nothing buffers a whole body.
func TestStreamingIsFlat(t *testing.T) {
	size := 1 << 30
	e := newEnv(t)
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/up":
			n, _ := io.Copy(io.Discard, r.Body)
			io.WriteString(w, strconv.FormatInt(n, 10))
		case "/down":
			w.Header().Set("Content-Length", strconv.Itoa(size))
			io.CopyN(w, zeros{}, int64(size))
		}
	}))
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})

	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapInuse > peak.Load() {
					peak.Store(m.HeapInuse)
				}
			}
		}
	})
	c := e.h1Client()
	req, _ := http.NewRequest("POST", "http://app.example.test/up", io.LimitReader(zeros{}, int64(size)))
	req.ContentLength = int64(size)
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != strconv.Itoa(size) {
		t.Fatalf("target read %s bytes", b)
	}
	res, err = c.Get("http://app.example.test/down")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil || n != int64(size) {
		t.Fatalf("downloaded %d bytes: %v", n, err)
	}
	close(stop)
	wg.Wait()
	grown := int64(peak.Load()) - int64(base)
	t.Logf("heap in use grew by at most %d KiB while moving %d MiB each way", grown>>10, size>>20)
	if grown > 48<<20 {
		t.Errorf("heap grew by %d MiB: a body is being buffered", grown>>20)
	}
	e.waitRequests("app.example.test", 2) // a request is counted just after its response is flushed
	st := e.stat("app.example.test")
	if st.BytesIn < uint64(size) || st.BytesOut < uint64(size) {
		t.Errorf("bytes not accounted: %+v", st)
	}
}

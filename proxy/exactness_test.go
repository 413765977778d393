package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestConcurrentCountsAreExact: N clients × M requests through a real listener give
// exactly N×M requests, N connections and the exact bytes the clients put on and took
// off the wire.
func TestConcurrentCountsAreExact(t *testing.T) {
	const clients, perClient = 8, 50
	e := newEnv(t)
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s:%d", r.URL.Path, len(b))
	}))
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})

	var (
		mu             sync.Mutex
		sent, received int64
		wg             sync.WaitGroup
		errs           collect
	)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", e.http)
			if err != nil {
				errs.add(err)
				return
			}
			defer c.Close()
			cr := &countReader{r: c}
			br := bufio.NewReader(cr)
			var out int64
			for j := range perClient {
				body := strings.Repeat("b", (i*perClient+j)%97)
				raw := fmt.Sprintf("POST /c%d/r%d HTTP/1.1\r\nHost: app.example.test\r\nContent-Length: %d\r\n\r\n%s", i, j, len(body), body)
				n, err := io.WriteString(c, raw)
				if err != nil {
					errs.add(err)
					return
				}
				out += int64(n)
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					errs.add(err)
					return
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if want := fmt.Sprintf("/c%d/r%d:%d", i, j, len(body)); string(b) != want || res.StatusCode != 200 {
					errs.add(fmt.Errorf("got %d %q, want %q", res.StatusCode, b, want))
					return
				}
			}
			c.Close()
			mu.Lock()
			sent += out
			received += cr.n.Load()
			mu.Unlock()
		}()
	}
	wg.Wait()
	errs.check(t)
	waitFor(t, "exact totals", func() bool {
		st := e.stat("app.example.test")
		return st.Requests == clients*perClient && int64(st.BytesIn) == sent && int64(st.BytesOut) == received
	})
	if st := e.stat("app.example.test"); st.Connections != clients {
		t.Fatalf("connections %d, want %d", st.Connections, clients)
	}
}

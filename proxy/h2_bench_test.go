package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// HTTP/2 (h2c, net/http's server) through the proxy: 16 MiB bodies each way and small
// requests, the cases where per-stream work (such as the client progress deadlines,
// forward.go) shows.

func benchH2Env(b *testing.B) (*env, *http.Client) {
	e := newEnv(b)
	be := backend(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/up":
			n, _ := io.Copy(io.Discard, r.Body)
			io.WriteString(w, strconv.FormatInt(n, 10))
		case "/down":
			size, _ := strconv.Atoi(r.URL.Query().Get("n"))
			w.Header().Set("Content-Length", strconv.Itoa(size))
			io.CopyN(w, zeros{}, int64(size))
		default:
			io.WriteString(w, "hello")
		}
	}))
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
	return e, e.h2cClient()
}

func BenchmarkH2Download(b *testing.B) {
	_, c := benchH2Env(b)
	const size = 16 << 20
	b.SetBytes(size)
	for b.Loop() {
		res, err := c.Get("http://app.example.test/down?n=" + strconv.Itoa(size))
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if n != size {
			b.Fatalf("got %d", n)
		}
	}
}

func BenchmarkH2Upload(b *testing.B) {
	_, c := benchH2Env(b)
	const size = 16 << 20
	b.SetBytes(size)
	for b.Loop() {
		req, _ := http.NewRequest("POST", "http://app.example.test/up", io.LimitReader(zeros{}, size))
		res, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(body) != strconv.Itoa(size) {
			b.Fatalf("got %s", body)
		}
	}
}

func BenchmarkH2Small(b *testing.B) {
	_, c := benchH2Env(b)
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := c.Get("http://app.example.test/small")
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	})
}

func BenchmarkH2SmallPost(b *testing.B) {
	_, c := benchH2Env(b)
	payload := bytes.Repeat([]byte("x"), 2048)
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := c.Post("http://app.example.test/up", "application/octet-stream", bytes.NewReader(payload))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	})
}

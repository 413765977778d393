package browser

// The target behind the ingress: a plain HTTP/1.1 server on loopback that serves the page
// of checks and the endpoints it drives.

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

//go:embed testdata/page.html
var pageHTML []byte

//go:embed testdata/page.js
var pageJS []byte

const (
	// downloadSize is the size of /download.
	downloadSize = 8 << 20
	// ssePeriod is the time between two Server-Sent Events.
	ssePeriod = 20 * time.Millisecond
	// sseCap bounds one event stream that nobody closes.
	sseCap = 30 * time.Second
	// wsReadLimit is the largest WebSocket message the target accepts.
	wsReadLimit = 2 << 20
)

// downloadBody is /download's body: downloadSize deterministic pseudo-random bytes.
var downloadBody = func() []byte {
	b := make([]byte, downloadSize)
	_, _ = rand.NewChaCha8([32]byte{'i', 'n', 'g', 'r', 'e', 's', 's'}).Read(b)
	return b
}()

// downloadSHA256 is the hex SHA-256 of downloadBody.
var downloadSHA256 = func() string { s := sha256.Sum256(downloadBody); return hex.EncodeToString(s[:]) }()

// imageSize is the width and height of /img/N.png, which the page checks.
func imageSize(n int) (w, h int) { return 8 + n, 8 + n%7 }

// target is one target server; name tells it apart from another one (whoami, X-Target).
type target struct {
	name string
	srv  *httptest.Server
	// sseEnded counts event streams that ended because the request's context did (the
	// ingress cancelled it), sseCapped those that ran to sseCap.
	sseEnded, sseCapped atomic.Int64
	// wsOpen is the number of WebSocket connections open now.
	wsOpen atomic.Int64
}

// newTarget starts a target on loopback, closed at cleanup.
func newTarget(t *testing.T, name string) *target {
	tg := &target{name: name}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", tg.page)
	mux.HandleFunc("GET /landing", tg.page)
	mux.HandleFunc("GET /page.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		_, _ = w.Write(pageJS)
	})
	mux.HandleFunc("GET /img/{n}", tg.image)
	mux.HandleFunc("GET /api/item", tg.item)
	mux.HandleFunc("POST /api/item", tg.item)
	mux.HandleFunc("POST /upload", tg.upload)
	mux.HandleFunc("GET /download", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(downloadBody)))
		_, _ = w.Write(downloadBody)
	})
	mux.HandleFunc("GET /ws", tg.websocket)
	mux.HandleFunc("GET /sse", tg.sse)
	tg.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Target", name)
		w.Header().Set("Cache-Control", "no-store") // every load goes through the ingress
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(tg.srv.Close)
	return tg
}

// addr is the target's host:port.
func (tg *target) addr() string { return tg.srv.Listener.Addr().String() }

func (tg *target) page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(pageHTML)
}

// image answers /img/N.png with an imageSize(N) PNG.
func (tg *target) image(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(strings.TrimSuffix(r.PathValue("n"), ".png"))
	if err != nil || n < 0 || n > 1000 {
		http.NotFound(w, r)
		return
	}
	width, height := imageSize(n)
	img := image.NewNRGBA(image.Rect(0, 0, width, height))
	for i := range img.Pix {
		img.Pix[i] = byte(n * (i + 1))
	}
	img.Set(0, 0, color.NRGBA{A: 255})
	w.Header().Set("Content-Type", "image/png")
	_ = png.Encode(w, img)
}

// item answers GET ?i=N and POST {"i":N,"pad":"…"} with {"i":N,"square":N*N,"padLen":…}.
func (tg *target) item(w http.ResponseWriter, r *http.Request) {
	var in struct {
		I   int    `json:"i"`
		Pad string `json:"pad"`
	}
	if r.Method == http.MethodPost {
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	} else {
		var err error
		if in.I, err = strconv.Atoi(r.URL.Query().Get("i")); err != nil {
			http.Error(w, "i: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"i": in.I, "square": in.I * in.I, "padLen": len(in.Pad), "method": r.Method})
}

// upload answers a POST with the size and hex SHA-256 of its body.
func (tg *target) upload(w http.ResponseWriter, r *http.Request) {
	h := sha256.New()
	n, err := io.Copy(h, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"size": n, "sha256": hex.EncodeToString(h.Sum(nil))})
}

// websocket echoes every message, except the text "whoami", answered "target:NAME".
func (tg *target) websocket(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: []string{appHost + ":*"}})
	if err != nil {
		return
	}
	defer c.CloseNow()
	tg.wsOpen.Add(1)
	defer tg.wsOpen.Add(-1)
	c.SetReadLimit(wsReadLimit)
	ctx := r.Context()
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageText && string(b) == "whoami" {
			b = []byte("target:" + tg.name)
		}
		if err := c.Write(ctx, typ, b); err != nil {
			return
		}
	}
}

// sse sends an event with the next id every ssePeriod until the request ends (or sseCap).
func (tg *target) sse(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	tick := time.NewTicker(ssePeriod)
	defer tick.Stop()
	capped := time.NewTimer(sseCap)
	defer capped.Stop()
	for id := 0; ; id++ {
		if _, err := fmt.Fprintf(w, "id: %d\ndata: {\"n\":%d}\n\n", id, id); err != nil {
			tg.sseEnded.Add(1)
			return
		}
		if err := rc.Flush(); err != nil {
			tg.sseEnded.Add(1)
			return
		}
		select {
		case <-r.Context().Done():
			tg.sseEnded.Add(1)
			return
		case <-capped.C:
			tg.sseCapped.Add(1)
			return
		case <-tick.C:
		}
	}
}

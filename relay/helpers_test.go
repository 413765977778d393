package relay

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// pair is two Peers over a real loopback socket: server from Accept, client from Dial.
type pair struct {
	server, client       *Peer
	serverErr, clientErr chan error
}

func newPair(t *testing.T, so, co Options, setupServer, setupClient func(*Peer)) *pair {
	t.Helper()
	pr := &pair{serverErr: make(chan error, 1), clientErr: make(chan error, 1)}
	got := make(chan *Peer, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != Path {
			http.NotFound(w, r)
			return
		}
		p, err := Accept(w, r, so)
		if err != nil {
			return
		}
		if setupServer != nil {
			setupServer(p)
		}
		got <- p
		pr.serverErr <- p.Run(context.Background())
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, srv.URL, co)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	if setupClient != nil {
		setupClient(c)
	}
	pr.client = c
	select {
	case pr.server = <-got:
	case <-ctx.Done():
		t.Fatal("server peer never accepted")
	}
	go func() { pr.clientErr <- c.Run(context.Background()) }()
	t.Cleanup(func() {
		_ = pr.client.Close()
		_ = pr.server.Close()
		waitErr(t, pr.clientErr)
		waitErr(t, pr.serverErr)
	})
	return pr
}

func waitErr(t *testing.T, ch chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		ch <- err
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// rawServer accepts one socket with coder/websocket directly, so a test can write any frame
// to a Peer built by Dial and read what the Peer sends.
func rawServer(t *testing.T, serve func(ctx context.Context, c *websocket.Conn)) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c.SetReadLimit(-1)
		defer close(done)
		defer c.CloseNow()
		serve(ctx, c)
	}))
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		srv.Close()
	})
	return srv.URL
}

// rawClient dials a server Peer with coder/websocket directly.
func rawClient(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url+Path, nil)
	if err != nil {
		t.Fatalf("raw dial: %v", err)
	}
	c.SetReadLimit(-1)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func readFrame(t *testing.T, c *websocket.Conn) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		t.Fatalf("got message type %v, want text", typ)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("frame is not a JSON object: %v", err)
	}
	return m
}

func writeFrame(t *testing.T, c *websocket.Conn, typ websocket.MessageType, s string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, typ, []byte(s)); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func example(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read example: %v", err)
	}
	return b
}

func jsonEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	norm := func(v any) any {
		var b []byte
		switch x := v.(type) {
		case []byte:
			b = x
		case json.RawMessage:
			b = x
		case string:
			b = []byte(x)
		default:
			var err error
			if b, err = json.Marshal(x); err != nil {
				t.Fatalf("%s: marshal: %v", what, err)
			}
		}
		var out any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: not JSON: %v", what, err)
		}
		return out
	}
	g, w := norm(got), norm(want)
	if !reflect.DeepEqual(g, w) {
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		t.Fatalf("%s:\n got %s\nwant %s", what, gb, wb)
	}
}

func fastOpts() Options {
	return Options{CallTimeout: 5 * time.Second, CallDeadline: 10 * time.Second}
}

// servePeer serves every connection with a Peer set up by setup; the Peers stop when the
// test ends.
func servePeer(t *testing.T, o Options, setup func(*Peer)) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := Accept(w, r, o)
		if err != nil {
			return
		}
		if setup != nil {
			setup(p)
		}
		_ = p.Run(ctx)
	}))
	t.Cleanup(func() { cancel(); srv.Close() })
	return srv.URL
}

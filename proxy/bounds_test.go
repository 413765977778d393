package proxy

import "testing"

// TestBoundsDefaults: the bounds over all clients derive from the machine's memory and
// descriptor limit as bounds.go says, within their floors.
func TestBoundsDefaults(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		mem, nofile uint64
		requests    int64
		held        int64
	}{
		{mem: 4 * gib, nofile: 1 << 20, requests: 1024, held: 32 << 20},
		{mem: 16 * gib, nofile: 1 << 20, requests: 4096, held: 128 << 20},
		{mem: 16 * gib, nofile: 4096, requests: 2048, held: 128 << 20},
		{mem: 512 << 20, nofile: 1 << 20, requests: minMaxRequests, held: minRequestBufferTotal},
		{mem: 0, nofile: 0, requests: minMaxRequests, held: minRequestBufferTotal},
	} {
		if got := defaultMaxRequests(c.mem, c.nofile); got != c.requests {
			t.Errorf("memory %d, %d descriptors: max requests %d, want %d", c.mem, c.nofile, got, c.requests)
		}
		if got := defaultRequestBufferTotal(c.mem); got != c.held {
			t.Errorf("memory %d: request buffer total %d, want %d", c.mem, got, c.held)
		}
	}
	var b serverBounds
	b.init(Config{MaxRequests: -1, RequestBufferTotal: -1})
	if b.maxRequests != 0 || b.maxHeld != 0 {
		t.Errorf("negative bounds: %d, %d; want none", b.maxRequests, b.maxHeld)
	}
	b.init(Config{MaxRequests: 7, RequestBufferTotal: 9})
	if b.maxRequests != 7 || b.maxHeld != 9 {
		t.Errorf("bounds 7, 9 became %d, %d", b.maxRequests, b.maxHeld)
	}
}

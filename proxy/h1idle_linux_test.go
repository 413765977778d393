package proxy

import (
	"testing"
	"time"
)

// TestParkQueueCompacts: the timeout queue drops the entries of connections that left
// the parker (unparked before their deadline) once they outnumber the live ones, keeps
// the live ones in park order, and waits for the oldest live deadline, not a stale one.
func TestParkQueueCompacts(t *testing.T) {
	p := &parker{s: &Server{}, epoch: time.Now()}
	var live []parkee
	for i := range 3000 {
		c := &h1Conn{}
		c.pr = parkRec{state: &c.state, awake: h1Idle}
		p.seq++
		c.pr.seq = p.seq
		e := parkEntry{c: c, seq: p.seq, deadline: time.Hour + time.Duration(i)*time.Millisecond}
		if i%300 == 299 {
			c.state.Store(h1Parked)
			live = append(live, c)
		} else {
			c.state.Store(h1Idle) // unparked since: a stale entry
		}
		p.queue = append(p.queue, e)
	}
	// One stale re-park: the connection is parked again under a newer number.
	again := p.queue[0].c.(*h1Conn)
	again.state.Store(h1Parked)
	p.seq++
	again.pr.seq = p.seq
	p.queue = append(p.queue, parkEntry{c: again, seq: p.seq, deadline: 2 * time.Hour})
	live = append(live, again)
	p.live = len(live)

	p.mu.Lock()
	p.compact()
	p.mu.Unlock()
	if got := len(p.queue) - p.head; got != len(live) {
		t.Fatalf("%d entries after compaction, want the %d live ones", got, len(live))
	}
	for i, e := range p.queue[p.head:] {
		if e.c != live[i] || !p.valid(&e) {
			t.Fatalf("entry %d after compaction is not live connection %d in park order", i, i)
		}
	}
	ms := p.waitMillis()
	want := time.Hour + 299*time.Millisecond
	if d := time.Duration(ms) * time.Millisecond; d < want-time.Second || d > want+parkTick {
		t.Fatalf("waits %s, want about %s (the oldest live deadline, rounded up to parkTick)", d, want)
	}
}

// TestHandshakesMakeAWave: completed QUIC handshakes count into the memory release's
// wave like parks (HTTP/3 connections never park): after releaseWave of them a release
// is in view, due releaseQuiet after the last; without ReleaseIdleMemory none is.
func TestHandshakesMakeAWave(t *testing.T) {
	for _, on := range []bool{true, false} {
		p := &parker{s: &Server{cfg: Config{ReleaseIdleMemory: on}}, epoch: time.Now(), lastRelease: -releaseEvery, wake: -1}
		for range releaseWave - 1 {
			p.noteHandshake()
		}
		p.mu.Lock()
		_, early := p.releaseAt()
		p.mu.Unlock()
		if early {
			t.Fatalf("a release in view after %d handshakes, want it after %d", releaseWave-1, releaseWave)
		}
		p.noteHandshake()
		p.mu.Lock()
		at, ok := p.releaseAt()
		last := p.lastPark
		p.mu.Unlock()
		if ok != on {
			t.Fatalf("ReleaseIdleMemory %v: release in view %v after %d handshakes", on, ok, releaseWave)
		}
		if ok && at != last+releaseQuiet {
			t.Fatalf("the release is due at %s, want %s (releaseQuiet after the last handshake)", at, last+releaseQuiet)
		}
	}
	var none *parker
	none.noteHandshake() // nil-safe: no parker where nothing parks
}

// TestReleaseTail: a wave's release arms one more for the parks that follow it (a wave
// its clients' pause cut in two), due releaseEvery after the first; that tail's release
// arms none.
func TestReleaseTail(t *testing.T) {
	p := &parker{s: &Server{cfg: Config{ReleaseIdleMemory: true}}, epoch: time.Now().Add(-time.Hour), lastRelease: -releaseEvery, wake: -1}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wave, p.lastPark = releaseWave, time.Since(p.epoch)-releaseQuiet
	if !p.releaseDue() || !p.tail {
		t.Fatal("a wave of releaseWave parks, quiet for releaseQuiet: no release, or no tail armed")
	}
	p.releasing = false
	if _, ok := p.releaseAt(); ok {
		t.Fatal("a release in view with no park since the last")
	}
	p.wave, p.lastPark = 3, time.Since(p.epoch)
	at, ok := p.releaseAt()
	if !ok || at != p.lastRelease+releaseEvery {
		t.Fatalf("the tail's release: in view %v at %s, want releaseEvery (%s) after the wave's at %s", ok, at, releaseEvery, p.lastRelease)
	}
	p.lastRelease -= releaseEvery // a minute on
	p.lastPark -= releaseQuiet
	if !p.releaseDue() || p.tail {
		t.Fatal("the tail's release did not come, or armed another")
	}
	p.releasing = false
	p.wave = 5
	if _, ok := p.releaseAt(); ok {
		t.Fatal("parks after a tail's release brought another into view")
	}
}

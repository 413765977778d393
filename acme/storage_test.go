package acme

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/serve-zone/ingress/internal/testwait"
)

// TestOwnedStorageStopsWriting: after close, nothing more is written or locked, and
// close waits for a lock still held (certmagic keeps a lock's file fresh until Unlock).
func TestOwnedStorageStopsWriting(t *testing.T) {
	dir := t.TempDir()
	s := newOwnedStorage(&certmagic.FileStorage{Path: dir})
	ctx := context.Background()
	if err := s.Store(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Lock(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	closed := make(chan bool, 1)
	go func() { closed <- s.close(5 * time.Second) }()
	// close refuses new writes at once, before the lock is released.
	testwait.Until(t, 5*time.Second, "close to begin", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.closed
	})
	if err := s.Store(ctx, "b", []byte("2")); !errors.Is(err, errStorageClosed) {
		t.Fatalf("Store after close: %v, want errStorageClosed", err)
	}
	select {
	case <-closed:
		t.Fatal("close returned while a lock was held")
	default:
	}
	if err := s.Unlock(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	if ok := <-closed; !ok {
		t.Fatal("close gave up although the lock was released")
	}
	if err := s.Lock(ctx, "other"); !errors.Is(err, errStorageClosed) {
		t.Errorf("Lock after close: %v, want errStorageClosed", err)
	}
	if _, err := s.Load(ctx, "a"); err != nil {
		t.Errorf("reads stay allowed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "locks")); err == nil {
		entries, _ := os.ReadDir(filepath.Join(dir, "locks"))
		if len(entries) > 0 {
			t.Errorf("a lock file is left: %v", entries)
		}
	}
}

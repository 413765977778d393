package acme

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
)

// ownedStorage is certmagic's storage with an owner: certmagic obtains and renews on
// goroutines of its own that outlive a cancelled context for a moment, and they must
// not write into Options.Dir once Run has returned (an operator may remove or reuse the
// directory). close refuses every later write and lock, then waits for the writes and
// locks under way to end; reads stay allowed.
type ownedStorage struct {
	certmagic.Storage

	mu     sync.Mutex
	closed bool
	busy   int // writes in progress plus locks held
	idle   *sync.Cond
}

var errStorageClosed = errors.New("acme: stopped; the certificate store takes no more writes")

// String names the storage underneath (certmagic logs its storage).
func (o *ownedStorage) String() string { return fmt.Sprint(o.Storage) }

func newOwnedStorage(s certmagic.Storage) *ownedStorage {
	o := &ownedStorage{Storage: s}
	o.idle = sync.NewCond(&o.mu)
	return o
}

// begin counts one write or lock, or refuses it after close.
func (o *ownedStorage) begin() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return errStorageClosed
	}
	o.busy++
	return nil
}

func (o *ownedStorage) end() {
	o.mu.Lock()
	o.busy--
	if o.busy == 0 {
		o.idle.Broadcast()
	}
	o.mu.Unlock()
}

func (o *ownedStorage) Store(ctx context.Context, key string, value []byte) error {
	if err := o.begin(); err != nil {
		return err
	}
	defer o.end()
	return o.Storage.Store(ctx, key, value)
}

func (o *ownedStorage) Delete(ctx context.Context, key string) error {
	if err := o.begin(); err != nil {
		return err
	}
	defer o.end()
	return o.Storage.Delete(ctx, key)
}

// Lock holds one count until Unlock: a lock's file is written and kept fresh by the
// storage until then.
func (o *ownedStorage) Lock(ctx context.Context, name string) error {
	if err := o.begin(); err != nil {
		return err
	}
	if err := o.Storage.Lock(ctx, name); err != nil {
		o.end()
		return err
	}
	return nil
}

// TryLock is Lock without the wait (certmagic's TryLocker: replicas that find an ARI
// update's lock taken skip it instead of waiting).
func (o *ownedStorage) TryLock(ctx context.Context, name string) (bool, error) {
	tl, ok := o.Storage.(certmagic.TryLocker)
	if !ok {
		return false, fmt.Errorf("acme: the certificate store %v cannot try a lock", o.Storage)
	}
	if err := o.begin(); err != nil {
		return false, err
	}
	got, err := tl.TryLock(ctx, name)
	if !got || err != nil {
		o.end()
	}
	return got, err
}

func (o *ownedStorage) Unlock(ctx context.Context, name string) error {
	defer o.end()
	return o.Storage.Unlock(ctx, name)
}

// close refuses later writes and locks and waits up to timeout for those under way; it
// reports whether they all ended.
func (o *ownedStorage) close(timeout time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	if o.busy == 0 {
		return true
	}
	t := time.AfterFunc(timeout, func() {
		o.mu.Lock()
		o.idle.Broadcast()
		o.mu.Unlock()
	})
	defer t.Stop()
	deadline := time.Now().Add(timeout)
	for o.busy > 0 && time.Now().Before(deadline) {
		o.idle.Wait()
	}
	return o.busy == 0
}

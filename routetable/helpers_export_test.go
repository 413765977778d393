package routetable

import (
	"context"

	"go.uber.org/zap"
)

// Helpers only tests use (production code uses NewFileSource, Decode and DecodeFile).

// watchFile loads path into store and then watches it until ctx is done. A file refused
// at start returns its error at once (every violation listed): the ingress must not start
// without a table. Otherwise it returns nil when ctx is done, or the watcher's error.
func watchFile(ctx context.Context, path string, store *Store, logger *zap.Logger) error {
	f := NewFileSource(path, store, FileSourceOptions{Logger: logger})
	if err := f.Load(); err != nil {
		return err
	}
	return f.Run(ctx)
}

package routetable

import (
	"context"
	"encoding/json"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/internal/jsonx"
)

// Helpers only tests use (production code uses NewFileSource, Decode and DecodeFile).

// WatchFile loads path into store and then watches it until ctx is done. A file refused
// at start returns its error at once (every violation listed): the ingress must not start
// without a table. Otherwise it returns nil when ctx is done, or the watcher's error.
func WatchFile(ctx context.Context, path string, store *Store, logger *zap.Logger) error {
	f := NewFileSource(path, store, FileSourceOptions{Logger: logger})
	if err := f.Load(); err != nil {
		return err
	}
	return f.Run(ctx)
}

// DecodeRaw is Decode for a table embedded in a larger body (the relay's
// `{ "table": ... }` answer), reporting violations below path into e. It returns nil
// when it added any violation; a JSON null is a violation too (the caller handles the
// nullable `table` itself). raw is not retained.
func DecodeRaw(raw json.RawMessage, path string, mode Mode, e *jsonx.Errors) *Table {
	before := e.Len()
	if !json.Valid(raw) {
		e.Addf("", "%s must be an object", pathName(path))
		return nil
	}
	t, _ := decodeTable(raw, path, mode, nil, e)
	if e.Len() > before {
		return nil
	}
	return t
}

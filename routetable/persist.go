package routetable

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/internal/atomicfile"
)

// StateFile is the name of the last-known-good table inside StoreOptions.StateDir.
const StateFile = "routetable.json"

// writeState replaces dir/routetable.json atomically: a temporary file in the same
// directory, written, fsynced and renamed over the old one, then the directory fsynced,
// so a crash leaves either the old table or the new one, never a torn file. The file
// holds private keys and is created with mode 0600.
func writeState(dir string, t *Table) error {
	data, err := t.MarshalJSON() // directly: json.Marshal would re-scan 16 MB to compact it
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, StateFile), data)
}

// LoadState applies the last-known-good table from StateDir, if there is one, so that a
// restarted ingress serves before its relay answers. A missing file (or no StateDir)
// returns nil. A file that cannot be read, decoded or validated is logged and ignored: the
// returned error only tells the caller why, and the store stays as it was. Call it before
// anything else applies a table: a table already serving that is as new or newer wins.
func (s *Store) LoadState() error {
	if s.stateDir == "" {
		return nil
	}
	path := filepath.Join(s.stateDir, StateFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		var t *Table
		if t, err = Decode(data, s.mode); err == nil {
			// Not remembered as refused: the relay may well send this revision valid.
			err = s.apply(t, false, true)
		} else {
			s.redacted(err.(*Error)) // the file holds what the relay sent
		}
	}
	if err != nil {
		var re *Error
		if errors.As(err, &re) && re.Code == CodeInvalid {
			s.log.Warn("last-known-good route table ignored", zap.String("path", path),
				revisionField(re.Revision), zap.Strings("violations", re.Violations))
		} else {
			s.log.Warn("last-known-good route table ignored", zap.String("path", path), zap.Error(err))
		}
		return fmt.Errorf("routetable: last-known-good %s ignored: %w", path, err)
	}
	return nil
}

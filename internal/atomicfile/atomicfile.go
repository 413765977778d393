// Package atomicfile replaces files so that a crash leaves either the old content or the
// new, never a torn file: write a temporary file in the same directory (mode 0600, since
// what we persist can hold private keys), fsync it, rename it over the target, fsync the
// directory.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data, readable and writable by the owner only.
func Write(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(0o600); err == nil {
		if _, err = f.Write(data); err == nil {
			err = f.Sync()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	// The rename happened; a failed directory sync only leaves its durability unconfirmed.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

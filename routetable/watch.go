package routetable

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// DefaultDebounce is how long FileSource waits after the last change event before it
// reads the file, so an editor's several writes become one reload.
const DefaultDebounce = 150 * time.Millisecond

// LoadFile reads and judges a standalone routes file (contract §7) as FileSource does:
// DecodeFile (certificate files resolved against the file's directory), then every rule
// in ModeStandalone. The error lists every violation (an *Error with CodeInvalid), or
// says why the file could not be read; it never contains key material.
func LoadFile(path string) (*Table, error) {
	p, err := PrepareFile(path)
	if err != nil {
		return nil, err
	}
	return p.t, nil
}

// PreparedFile is a standalone routes file read, decoded and judged once (PrepareFile),
// so that the FileSource given it (FileSourceOptions.Prepared) applies it at its first
// Load without reading, decoding or validating it again: the ingress judges its --routes
// file before it starts anything, and a 100,000-route file is not worth judging twice.
type PreparedFile struct {
	path  string
	t     *Table
	v     *validated
	sum   [sha256.Size]byte
	files []string
}

// PrepareFile is LoadFile, keeping what a FileSource for path needs to apply the table.
func PrepareFile(path string) (*PreparedFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("routetable: read routes file: %w", err)
	}
	t, fr, err := decodeFile(data, filepath.Dir(filepath.Clean(path)))
	if err != nil {
		return nil, err
	}
	v := validate(t, ModeStandalone, time.Now(), nil)
	if len(v.violations) > 0 {
		return nil, newInvalid(revisionOf(t), v.violations)
	}
	return &PreparedFile{path: filepath.Clean(path), t: t, v: v, sum: fr.sum(), files: fr.files}, nil
}

// Table returns the judged table. It must not be modified: the FileSource applies it.
func (p *PreparedFile) Table() *Table { return p.t }

// FileSourceOptions configure a FileSource. The zero value is usable.
type FileSourceOptions struct {
	// Logger receives read failures and watcher errors; nil means zap.NewNop(). Refusals
	// are logged by the Store.
	Logger *zap.Logger
	// Debounce is the quiet time after a change event before the reload; zero or less
	// means DefaultDebounce.
	Debounce time.Duration
	// Document, when not nil, is served instead of the file's content: the path is then
	// neither read nor watched, it only anchors relative certificate file names (its
	// directory) and names the source in messages. The certificate files the document
	// names are still read and watched (`ingress proxy` serves its one route this way).
	Document []byte
	// Prepared, when it was made by PrepareFile for the same path, is what the first Load
	// applies instead of reading and judging the file again.
	Prepared *PreparedFile
}

// FileSource feeds a Store (created with ModeStandalone) from a --routes file: once at
// start (Load), then on every change of the file or of a certificate file it names (Run,
// which watches their directories so that editors, config managers and Kubernetes volume
// updates that replace files by rename are seen) and on Reload (SIGHUP). Each reload is
// all or nothing: a file that fails to read or validate leaves the serving table in place.
// A file whose content (certificate files included) did not change is not applied again;
// one whose content changed is applied even if its revision did not
// (Store.ApplyStandalone). All methods are safe for concurrent use.
type FileSource struct {
	path     string
	doc      []byte // FileSourceOptions.Document
	prepared *PreparedFile
	store    *Store
	log      *zap.Logger
	debounce time.Duration
	reload   chan struct{}

	mu      sync.Mutex // serialises loads; guards the fields below
	sum     [sha256.Size]byte
	haveSum bool
	lastErr string
	refused bool     // the content of sum was not applied
	files   []string // the certificate files the last load named
}

// NewFileSource returns a source for path; it reads nothing until Load or Run.
func NewFileSource(path string, store *Store, opts FileSourceOptions) *FileSource {
	f := &FileSource{
		path:     filepath.Clean(path),
		doc:      opts.Document,
		prepared: opts.Prepared,
		store:    store,
		log:      opts.Logger,
		debounce: opts.Debounce,
		reload:   make(chan struct{}, 1),
	}
	if f.log == nil {
		f.log = zap.NewNop()
	}
	if f.debounce <= 0 {
		f.debounce = DefaultDebounce
	}
	return f
}

// Load reads the file and applies it if its content changed since the last load. It
// returns nil for an unchanged file, or the reason the file was not applied (a read
// error, or an *Error listing every violation). An unchanged file (certificate files
// included) costs its hash, not a decode.
func (f *FileSource) Load() error {
	_, err := f.load()
	return err
}

// loadOutcome is what a load did besides its error.
type loadOutcome int

const (
	loadApplied          loadOutcome = iota
	loadUnchanged                    // the same content as the last load, which was applied
	loadUnchangedRefused             // the same content as the last load, which was refused
	loadRefused                      // with the error
)

// load is Load, and says what came of it.
func (f *FileSource) load() (loadOutcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.prepared; p != nil {
		f.prepared = nil // once: later loads read the file
		if p.path == f.path && f.doc == nil && f.store.Mode() == ModeStandalone {
			f.sum, f.haveSum, f.files = p.sum, true, p.files
			return f.applied(f.store.applyValidated(p.t, p.v, true, false))
		}
	}
	standalone := f.store.Mode() == ModeStandalone
	if f.haveSum && standalone && f.unchanged() {
		f.log.Debug("routes file unchanged", zap.String("path", f.path))
		return f.unchangedOutcome(), nil
	}
	data := f.doc
	if data == nil {
		var err error
		if data, err = os.ReadFile(f.path); err != nil {
			return loadRefused, fmt.Errorf("routetable: read routes file: %w", err)
		}
	}
	var (
		t   *Table
		sum [sha256.Size]byte
		err error
	)
	if standalone {
		var fr *fileReader
		t, fr, err = decodeFile(data, filepath.Dir(f.path))
		sum = fr.sum()
		if len(fr.files) > 0 || err == nil || json.Valid(data) {
			f.files = fr.files
		}
	} else {
		sum = sha256.Sum256(data)
		t, err = Decode(data, f.store.Mode())
	}
	if f.haveSum && sum == f.sum {
		f.log.Debug("routes file unchanged", zap.String("path", f.path))
		return f.unchangedOutcome(), nil
	}
	// Remember the content before judging it: a refused file is reported once, not on
	// every event, until its content changes again.
	f.sum, f.haveSum = sum, true
	if err != nil {
		f.store.refuse(err.(*Error))
		f.refused = true
		return loadRefused, err
	}
	return f.applied(f.store.ApplyStandalone(t, true))
}

// applied records the outcome of an apply. f.mu must be held.
func (f *FileSource) applied(err error) (loadOutcome, error) {
	f.refused = err != nil
	if err != nil {
		return loadRefused, err
	}
	return loadApplied, nil
}

// unchangedOutcome is the outcome of reading the content of the last load again. f.mu
// must be held.
func (f *FileSource) unchangedOutcome() loadOutcome {
	if f.refused {
		return loadUnchangedRefused
	}
	return loadUnchanged
}

// unchanged reports whether the file and the certificate files it named hash to the
// sum of the last load, reading the file as a stream: a change event or the watch's
// start then costs no decode, and no copy of a 28 MB file in memory. f.mu must be held.
func (f *FileSource) unchanged() bool {
	var src io.Reader = bytes.NewReader(f.doc)
	if f.doc == nil {
		file, err := os.Open(f.path)
		if err != nil {
			return false
		}
		defer file.Close()
		src = file
	}
	sum, err := fingerprint(src, filepath.Dir(f.path), f.files)
	return err == nil && sum == f.sum
}

// watchList returns the files whose changes trigger a reload, by directory: the route
// file (unless a Document stands in for it) and the certificate files of the last load.
func (f *FileSource) watchList() map[string]map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]map[string]bool{}
	add := func(p string) {
		dir, base := filepath.Split(p)
		dir = filepath.Clean(dir)
		if out[dir] == nil {
			out[dir] = map[string]bool{}
		}
		out[dir][base] = true
	}
	if f.doc == nil {
		add(f.path)
	}
	for _, p := range f.files {
		add(p)
	}
	return out
}

// Reload asks Run to read the file now. It never blocks; requests made while one is
// pending coalesce.
func (f *FileSource) Reload() {
	select {
	case f.reload <- struct{}{}:
	default:
	}
}

// Run watches the file's directory and reloads on changes (debounced) and on Reload,
// until ctx is done; then it returns nil. It returns an error only when the watch cannot
// be set up. Call it once.
func (f *FileSource) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("routetable: watch routes file: %w", err)
	}
	defer w.Close()
	if f.doc == nil {
		dir := filepath.Dir(f.path)
		if err := w.Add(dir); err != nil {
			return fmt.Errorf("routetable: watch routes file: %w", err)
		}
	}
	// Directories being watched, and the names in each that matter. A certificate file
	// whose directory cannot be watched (yet) is tried again after every load.
	watched := map[string]bool{}
	if f.doc == nil {
		watched[filepath.Dir(f.path)] = true
	}
	var names map[string]map[string]bool
	unwatchable := map[string]string{}
	rewatch := func() {
		names = f.watchList()
		for dir := range names {
			if watched[dir] {
				continue
			}
			if err := w.Add(dir); err != nil {
				if unwatchable[dir] != err.Error() {
					unwatchable[dir] = err.Error()
					f.log.Warn("certificate file directory not watched: its changes need SIGHUP",
						zap.String("dir", dir), zap.Error(err))
				}
				continue
			}
			delete(unwatchable, dir)
			watched[dir] = true
		}
		for dir := range watched {
			if names[dir] == nil && (f.doc != nil || dir != filepath.Dir(f.path)) {
				_ = w.Remove(dir)
				delete(watched, dir)
			}
		}
	}
	rewatch()
	// From here on a change is seen.
	f.log.Debug("watching for routes file changes", zap.String("path", f.path), zap.Int("directories", len(watched)))
	// A change made between the caller's Load and the watch above would otherwise go
	// unseen until the next one; an unchanged file costs only its hash.
	f.loadLogged()
	rewatch()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			// A watched file itself, or a Kubernetes-style "..data" symlink swap beside it.
			// Any other file in the directory is skipped without a log line: a log file kept
			// beside the routes file would otherwise feed the watcher its own lines.
			dir, name := filepath.Split(ev.Name)
			if names[filepath.Clean(dir)][name] || strings.HasPrefix(name, "..") {
				f.log.Debug("routes file changed: reloading after the debounce",
					zap.String("file", ev.Name), zap.Duration("debounce", f.debounce))
				timer.Reset(f.debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			f.log.Warn("routes file watcher error", zap.Error(err))
		case <-timer.C:
			f.loadLogged()
			rewatch()
		case <-f.reload:
			f.log.Debug("routes file reload requested", zap.String("path", f.path))
			f.reloadReported()
			rewatch()
		}
	}
}

// reloadReported is a requested reload (SIGHUP): it loads and logs the outcome in one
// line at info or warn, naming the file: unchanged, applied (the revision), or not
// applied (refused or unreadable), with the revision still served. A refusal's
// violations are logged by the store.
func (f *FileSource) reloadReported() {
	outcome, err := f.load()
	name := f.path
	if f.doc != nil {
		name = "the command line's route"
	}
	serving := zap.Skip()
	if rev, ok := f.store.Applied(); ok {
		serving = zap.Int64("serving", rev)
	}
	switch outcome {
	case loadApplied:
		rev, _ := f.store.Applied()
		f.log.Info("reload: applied", zap.String("path", name), zap.Int64("revision", rev))
	case loadUnchanged:
		f.log.Info("reload: unchanged, nothing applied", zap.String("path", name), serving)
	case loadUnchangedRefused:
		f.log.Warn("reload: refused, still serving the last good table", zap.String("path", name), serving,
			zap.String("error", "unchanged since it was refused (logged then)"))
	default:
		var te *Error
		if errors.As(err, &te) {
			err = fmt.Errorf("%d violation(s), logged above", len(te.Violations))
		}
		f.log.Warn("reload: refused, still serving the last good table", zap.String("path", name), serving, zap.Error(err))
	}
	f.mu.Lock()
	f.lastErr = ""
	if err != nil {
		f.lastErr = err.Error()
	}
	f.mu.Unlock()
}

// loadLogged loads and logs a read failure once per distinct failure. Refusals are logged
// by the store.
func (f *FileSource) loadLogged() {
	_, err := f.load()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		f.lastErr = ""
		return
	}
	if _, isTable := err.(*Error); isTable {
		return
	}
	if msg := err.Error(); msg != f.lastErr {
		f.lastErr = msg
		f.log.Warn("routes file not reloaded", zap.String("path", f.path), zap.Error(err))
	}
}

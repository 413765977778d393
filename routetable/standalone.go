package routetable

import (
	"cmp"
	"crypto/sha256"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/serve-zone/ingress/internal/jsonx"
)

// A standalone route file (contract §7) is written by a person, so this ingress makes it
// friendlier than the relay's tables, which keep contract §6 exactly:
//
//   - routes, the targets of each route and certificates may come in any order: they are
//     sorted when the table is applied (duplicates are still refused, each naming the
//     entry it repeats);
//   - a certificate's PEM may be given as files, certificateFile and privateKeyFile,
//     instead of the certificatePem and privateKeyPem strings; relative names are
//     resolved against the route file's directory, and FileSource watches the files as it
//     watches the route file.

// maxPEMFile bounds a certificate or key file: a name that points at something else by
// mistake (a log, a disk image) is refused rather than read whole.
const maxPEMFile = 1 << 20

// DecodeFile reads a standalone route file: Decode in ModeStandalone, where a certificate
// may also name its PEM files (certificateFile, privateKeyFile), read here; relative names
// are resolved against dir. files lists every file named, resolved and in order, whether
// it could be read or not (the caller watches them). A file that cannot be read is a
// violation at its JSON path. Like Decode it judges the shape only; Validate (in
// ModeStandalone) judges the rules.
func DecodeFile(data []byte, dir string) (t *Table, files []string, err error) {
	t, fr, err := decodeFile(data, dir)
	return t, fr.files, err
}

// decodeFile is DecodeFile, also returning the reader (its files and its fingerprint of
// the route file and every file it read).
func decodeFile(data []byte, dir string) (*Table, *fileReader, error) {
	fr := newFileReader(dir)
	// The route file's hash (28 MB for 100,000 routes) is taken on another core while
	// the file is decoded.
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		fr.data = sha256.Sum256(data)
	}()
	t, err := decode(data, ModeStandalone, fr)
	<-hashed
	return t, fr, err
}

// fileReader reads the certificate files a standalone file names.
type fileReader struct {
	dir   string
	files []string
	data  [sha256.Size]byte // the route file's hash
	h     hash.Hash         // each file's name and content (or error), in order
}

func newFileReader(dir string) *fileReader {
	if dir == "" {
		dir = "."
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return &fileReader{dir: dir, h: sha256.New()}
}

// sum fingerprints what was read, the route file's hash and then the files': an
// unchanged sum means nothing the table depends on changed.
func (fr *fileReader) sum() [sha256.Size]byte {
	var files [sha256.Size]byte
	fr.h.Sum(files[:0])
	return sha256.Sum256(append(fr.data[:], files[:]...))
}

// read returns the resolved name and the content of the file name, reporting a file that
// cannot be read at path. The messages name the file and the system's reason, never its
// content.
func (fr *fileReader) read(name, path string, e *jsonx.Errors) (file, content string) {
	if strings.TrimSpace(name) == "" {
		e.Addf(path, "must name a file")
		return "", ""
	}
	file = name
	if !filepath.IsAbs(file) {
		file = filepath.Join(fr.dir, file)
	}
	file = filepath.Clean(file)
	fr.files = append(fr.files, file)
	b, err := fr.readHashed(file)
	if err != nil {
		e.Addf(path, "cannot be read: %v", err)
		return file, ""
	}
	return file, string(b)
}

// readHashed reads the resolved file name and adds its name and its content (or the
// error) to the fingerprint.
func (fr *fileReader) readHashed(file string) ([]byte, error) {
	fr.h.Write([]byte{0})
	fr.h.Write([]byte(file))
	fr.h.Write([]byte{0})
	b, err := readSmallFile(file)
	if err != nil {
		fr.h.Write([]byte("error: " + err.Error()))
		return nil, err
	}
	fr.h.Write(b)
	return b, nil
}

// fingerprint is the sum decodeFile would compute for the content of data (read to its
// end) when that content names files, in that order (as it does when it is unchanged
// since the decode that listed them), without decoding it or holding it in memory.
func fingerprint(data io.Reader, dir string, files []string) ([sha256.Size]byte, error) {
	fr := newFileReader(dir)
	h := sha256.New()
	if _, err := io.Copy(h, data); err != nil {
		return [sha256.Size]byte{}, err
	}
	h.Sum(fr.data[:0])
	for _, f := range files {
		_, _ = fr.readHashed(f)
	}
	return fr.sum(), nil
}

// readSmallFile reads a regular file of at most maxPEMFile bytes.
func readSmallFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &os.PathError{Op: "read", Path: name, Err: errNotRegular}
	}
	if fi.Size() > maxPEMFile {
		return nil, &os.PathError{Op: "read", Path: name, Err: errTooLarge}
	}
	return os.ReadFile(name)
}

type fileError string

func (e fileError) Error() string { return string(e) }

const (
	errNotRegular fileError = "not a regular file"
	errTooLarge   fileError = "larger than 1 MiB: not a PEM certificate or key"
)

// sortStandalone puts a validated standalone table in contract order: routes by hostname,
// each route's targets by address (as a string), then port, certificates by id. Validate
// has refused duplicates, so the order is strict.
func sortStandalone(t *Table) {
	slices.SortFunc(t.Routes, func(a, b Route) int { return strings.Compare(a.Hostname, b.Hostname) })
	for i := range t.Routes {
		ts := t.Routes[i].Targets
		slices.SortFunc(ts, func(a, b Target) int { return compareTargets(&a, &b) })
	}
	slices.SortFunc(t.Certificates, func(a, b Certificate) int { return cmp.Compare(a.ID, b.ID) })
}

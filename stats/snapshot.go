package stats

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/serve-zone/ingress/internal/atomicfile"
	"github.com/serve-zone/ingress/internal/jsonx"
)

// The snapshot file: every day inside the retention window, each with the counters of
// every hostname that had traffic, live slots and history merged.
//
//	{"version":1,"days":[{"dayUtc":"2026-11-28","hosts":[{"hostname":…,"counters":{…}}]}]}
type snapshotFile struct {
	Version int           `json:"version"`
	Days    []snapshotDay `json:"days"`
}

type snapshotDay struct {
	Day   Day            `json:"dayUtc"`
	Hosts []snapshotHost `json:"hosts"`
}

type snapshotHost struct {
	Hostname          string `json:"hostname"`
	Requests          uint64 `json:"requests"`
	BytesIn           uint64 `json:"bytesIn"`
	BytesOut          uint64 `json:"bytesOut"`
	Connections       uint64 `json:"connections"`
	ConnectFailures   uint64 `json:"connectFailures"`
	HandshakeFailures uint64 `json:"handshakeFailures"`
	RequestFailures   uint64 `json:"requestFailures"`
}

const snapshotVersion = 1

func (h snapshotHost) counters() Counters {
	return Counters{h.Requests, h.BytesIn, h.BytesOut, h.Connections,
		h.ConnectFailures, h.HandshakeFailures, h.RequestFailures}
}

func snapshotHostOf(name string, c Counters) snapshotHost {
	return snapshotHost{name, c.Requests, c.BytesIn, c.BytesOut, c.Connections,
		c.ConnectFailures, c.HandshakeFailures, c.RequestFailures}
}

// Flush writes the snapshot now: to a temporary file in Options.StateDir (mode 0600),
// fsynced, then renamed over SnapshotFile, so a crash leaves the old or the new file,
// never a torn one. Without StateDir it does nothing and returns nil. Before Load it
// returns ErrNotLoaded. An unchanged snapshot is not rewritten. Safe for concurrent use;
// recording is never blocked by the disk.
func (r *Registry) Flush() error {
	if r.stateDir == "" {
		return nil
	}
	// fileMu is held from copy to rename so that concurrent Flushes write in the order
	// they copied: an older copy never replaces a newer file.
	r.fileMu.Lock()
	defer r.fileMu.Unlock()
	r.mu.Lock()
	r.indexPendingLocked()
	if !r.loaded {
		r.mu.Unlock()
		return ErrNotLoaded
	}
	r.rollLocked(DayOf(r.now()))
	snap := r.snapshotLocked()
	r.mu.Unlock()

	data, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("encode statistics snapshot: %w", err)
	}
	if bytes.Equal(data, r.lastSnap) {
		return nil
	}
	if err := writeFileAtomic(filepath.Join(r.stateDir, SnapshotFile), data); err != nil {
		return err
	}
	r.lastSnap = data
	return nil
}

// snapshotLocked copies every retained day with traffic.
func (r *Registry) snapshotLocked() snapshotFile {
	snap := snapshotFile{Version: snapshotVersion, Days: []snapshotDay{}}
	hosts := r.sortedLocked()
	for _, d := range r.daysLocked(r.oldestLocked(), ^Day(0)) {
		entries := r.appendDayLocked(nil, d, hosts, "", false, int(^uint(0)>>1))
		if len(entries) == 0 {
			continue
		}
		sd := snapshotDay{Day: d, Hosts: make([]snapshotHost, len(entries))}
		for i, e := range entries {
			sd.Hosts[i] = snapshotHostOf(e.Hostname, r.countersLocked(d, e.Hostname, r.hosts[e.Hostname]))
		}
		snap.Days = append(snap.Days, sd)
	}
	return snap
}

func writeFileAtomic(path string, data []byte) error {
	if err := atomicfile.Write(path, data); err != nil {
		return fmt.Errorf("write statistics snapshot: %w", err)
	}
	return nil
}

// Load restores the snapshot in Options.StateDir, if there is one, adding its days that
// are inside the retention window to the counters (today's continue where they were).
// It must be called once, before Run and Flush; a second call does nothing. A missing
// file is not an error. A corrupt file returns an error matching ErrSnapshotCorrupt and
// restores nothing; the caller logs it and carries on (the next Flush replaces the file).
// Without StateDir it does nothing.
func (r *Registry) Load() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.indexPendingLocked()
	if r.loaded {
		return nil
	}
	r.loaded = true
	if r.stateDir == "" {
		return nil
	}
	path := filepath.Join(r.stateDir, SnapshotFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read statistics snapshot: %w", err)
	}
	snap, err := decodeSnapshot(data)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrSnapshotCorrupt, path, err)
	}
	oldest := r.oldestLocked()
	for _, sd := range snap.Days {
		if sd.Day < oldest {
			continue
		}
		for _, h := range sd.Hosts {
			r.archiveLocked(sd.Day, h.Hostname, h.counters())
		}
	}
	return nil
}

// decodeSnapshot reads a snapshot strictly: unknown or repeated keys, trailing data,
// duplicate days or hostnames and unordered entries make it corrupt. (A missing key reads
// as zero, as it did with encoding/json.)
func decodeSnapshot(data []byte) (snapshotFile, error) {
	var snap snapshotFile
	doc, err := jsonx.Parse(data)
	if err != nil {
		return snap, err
	}
	var e jsonx.Errors
	m := jsonx.Object(doc, "", &e, nil, []string{"version", "days"})
	if v, ok := m.Lookup("version"); ok {
		n, _ := jsonx.Int(v, "version", &e, 0, jsonx.MaxSafeInteger)
		snap.Version = int(n)
	}
	if v, ok := m.Lookup("days"); ok && !v.IsNull() {
		days, _ := jsonx.Array(v, "days", &e)
		snap.Days = make([]snapshotDay, len(days))
		for i, dv := range days {
			decodeSnapshotDay(dv, jsonx.Index("days", i), &e, &snap.Days[i])
		}
	}
	if err := e.Err(); err != nil {
		return snap, err
	}
	if snap.Version != snapshotVersion {
		return snap, fmt.Errorf("version %d, want %d", snap.Version, snapshotVersion)
	}
	if !slices.IsSortedFunc(snap.Days, func(a, b snapshotDay) int { return int(a.Day) - int(b.Day) }) {
		return snap, errors.New("days out of order")
	}
	for i, sd := range snap.Days {
		if i > 0 && snap.Days[i-1].Day == sd.Day {
			return snap, fmt.Errorf("day %s twice", sd.Day)
		}
		for k, h := range sd.Hosts {
			if h.Hostname == "" {
				return snap, fmt.Errorf("day %s: empty hostname", sd.Day)
			}
			if k > 0 && sd.Hosts[k-1].Hostname >= h.Hostname {
				return snap, fmt.Errorf("day %s: hostnames out of order", sd.Day)
			}
		}
	}
	return snap, nil
}

var snapshotHostKeys = []string{"hostname", "requests", "bytesIn", "bytesOut", "connections",
	"connectFailures", "handshakeFailures", "requestFailures"}

func decodeSnapshotDay(v jsonx.Value, path string, e *jsonx.Errors, sd *snapshotDay) {
	m := jsonx.Object(v, path, e, nil, []string{"dayUtc", "hosts"})
	if dv, ok := m.Lookup("dayUtc"); ok {
		if s, ok := jsonx.String(dv, jsonx.Join(path, "dayUtc"), e); ok {
			if d, ok := ParseDay(s); ok {
				sd.Day = d
			} else {
				e.Addf(jsonx.Join(path, "dayUtc"), "must be an existing UTC calendar day from 1970-01-01 on")
			}
		}
	}
	hv, ok := m.Lookup("hosts")
	if !ok || hv.IsNull() {
		return
	}
	hosts, _ := jsonx.Array(hv, jsonx.Join(path, "hosts"), e)
	sd.Hosts = make([]snapshotHost, len(hosts))
	for i, h := range hosts {
		p := jsonx.Index(jsonx.Join(path, "hosts"), i)
		hm := jsonx.Object(h, p, e, nil, snapshotHostKeys)
		out := &sd.Hosts[i]
		counters := [...]*uint64{&out.Requests, &out.BytesIn, &out.BytesOut, &out.Connections,
			&out.ConnectFailures, &out.HandshakeFailures, &out.RequestFailures}
		for _, f := range hm {
			if f.Key == "hostname" {
				out.Hostname, _ = jsonx.String(f.Val, jsonx.Join(p, "hostname"), e)
				continue
			}
			k := slices.Index(snapshotHostKeys, f.Key)
			if k < 1 {
				continue // reported by Object
			}
			n, err := strconv.ParseUint(string(f.Val), 10, 64)
			if err != nil {
				e.Addf(jsonx.Join(p, f.Key), "must be a non-negative integer")
			}
			*counters[k-1] = n
		}
	}
}

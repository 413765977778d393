package stats

import (
	"crypto/rand"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// DefaultRetentionDays is the contract's minimum retention, today included.
const DefaultRetentionDays = 35

// DefaultSnapshotInterval is how often Run writes a snapshot when Options.SnapshotInterval
// is zero: a crash (kill -9) loses at most this much of the counters.
const DefaultSnapshotInterval = 10 * time.Second

// SnapshotFile is the name of the snapshot inside Options.StateDir.
const SnapshotFile = "statistics.json"

// Options configure a Registry. The zero value is usable: it keeps
// DefaultRetentionDays, reads the wall clock and persists nothing.
type Options struct {
	// NodeID is stated in every statistics entry.
	NodeID string
	// RetentionDays is how many days (today included) are kept; zero or less means
	// DefaultRetentionDays, and values below it are raised to it.
	RetentionDays int
	// Now is the clock; nil means time.Now. Run's timers run on the runtime's clock
	// (tests use testing/synctest, where both are the bubble's fake clock).
	Now func() time.Time
	// StateDir, when not empty, is where Flush writes SnapshotFile and Load reads it.
	StateDir string
	// SnapshotInterval is how often Run writes a snapshot; zero or less means
	// DefaultSnapshotInterval. Unused without StateDir.
	SnapshotInterval time.Duration
	// Logger receives snapshot failures from Run; nil means zap.NewNop().
	Logger *zap.Logger
}

// Registry owns every Host, the current day, the archived days and the cursor key.
// Host creation, rollover, queries and snapshots take its mutex; recording through a Host
// never does. All methods are safe for concurrent use.
type Registry struct {
	nodeID    string
	retention int
	now       func() time.Time
	stateDir  string
	interval  time.Duration
	log       *zap.Logger
	cursorKey [32]byte // per-process: cursors do not survive a restart (the contract allows it)

	// today is read by every Host on the hot path. The padding keeps it off the cache
	// line of mu and the fields around it, which cold-path calls write.
	_     [64]byte
	today atomic.Uint32 // current Day+1
	_     [60]byte

	mu      sync.Mutex
	hosts   map[string]*Host
	pending []*Host            // made by Hosts before any was known, not yet in hosts
	sorted  []*Host            // hosts ordered by name; nil when a Host was added since
	history map[Day]*dayRecord // days that left the live slots, and restored days
	loaded  bool               // Load was called, so Flush may overwrite the file

	fileMu   sync.Mutex // serialises snapshot writes
	lastSnap []byte     // the bytes last written, to skip writing an unchanged snapshot
}

// dayRecord is one archived day: counters by hostname. names caches the sorted keys
// for paging; nil means stale.
type dayRecord struct {
	counts map[string]Counters
	names  []string
}

// NewRegistry returns a registry whose current day is the day of opts.Now(). It does not
// read the snapshot: call Load before recording matters and before Run.
func NewRegistry(opts Options) *Registry {
	r := &Registry{
		nodeID:    opts.NodeID,
		retention: opts.RetentionDays,
		now:       opts.Now,
		stateDir:  opts.StateDir,
		interval:  opts.SnapshotInterval,
		log:       opts.Logger,
		hosts:     make(map[string]*Host),
		history:   make(map[Day]*dayRecord),
	}
	if r.retention < DefaultRetentionDays {
		r.retention = DefaultRetentionDays
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.interval <= 0 {
		r.interval = DefaultSnapshotInterval
	}
	if r.log == nil {
		r.log = zap.NewNop()
	}
	rand.Read(r.cursorKey[:]) // never fails since Go 1.24
	r.today.Store(uint32(DayOf(r.now())) + 1)
	return r
}

// Today returns the day counters are currently recorded under.
func (r *Registry) Today() Day { return Day(r.today.Load() - 1) }

// Host returns the counters of hostname, creating them on first use. It is a cold-path
// call (route-table compilation), safe for concurrent use. Hosts are never removed: a
// hostname dropped from the route table keeps its past days.
func (r *Registry) Host(hostname string) *Host {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.indexPendingLocked()
	return r.hostLocked(hostname)
}

// Hosts is Host for every name of names at once (a route table's hostnames, which are
// distinct), under one lock: the index of hostnames grows once, and the new Hosts are
// allocated together, one block of 320-byte Hosts that keeps every slot on its own cache
// line (the block starts on a page, and 320 is five cache lines). out[i] belongs to
// names[i].
//
// While the registry knows no hostname yet (the first table of a start), the Hosts are
// returned without being indexed, which a 100,000-route table would make wait for
// 100,000 map insertions before the first request: they are indexed by the registry's
// next call that needs them (Run's first rollover check, a query, a scrape, a snapshot),
// in the background of the first requests. A name given twice is then one Host only if
// the registry knew some hostname already.
func (r *Registry) Hosts(names []string) []*Host {
	out := make([]*Host, len(names))
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.hosts) == 0 && len(r.pending) == 0 && len(names) > 0 {
		block := make([]Host, len(names))
		cur := r.today.Load()
		r.pending = make([]*Host, len(names))
		for i, n := range names {
			h := &block[i]
			h.name, h.today = n, &r.today
			h.slots[cur&(ringSize-1)].day.Store(cur)
			out[i], r.pending[i] = h, h
		}
		return out
	}
	r.indexPendingLocked()
	missing := 0
	for i, n := range names {
		if out[i] = r.hosts[n]; out[i] == nil {
			missing++
		}
	}
	if missing == 0 {
		return out
	}
	if missing > len(r.hosts)/4 {
		grown := make(map[string]*Host, len(r.hosts)+missing)
		maps.Copy(grown, r.hosts)
		r.hosts = grown
	}
	block := make([]Host, missing)
	cur := r.today.Load()
	for i, n := range names {
		if out[i] != nil {
			continue
		}
		if h := r.hosts[n]; h != nil { // a name given twice
			out[i] = h
			continue
		}
		h := &block[0]
		block = block[1:]
		h.name, h.today = n, &r.today
		h.slots[cur&(ringSize-1)].day.Store(cur)
		r.hosts[n] = h
		out[i] = h
	}
	r.sorted = nil
	return out
}

// indexPendingLocked puts the Hosts that Hosts made without indexing them in the index.
// Recording into them never waited for it: only the registry's own readers need it,
// and each calls this first. r.mu must be held.
func (r *Registry) indexPendingLocked() {
	if len(r.pending) == 0 {
		return
	}
	if len(r.hosts) == 0 {
		r.hosts = make(map[string]*Host, len(r.pending))
	}
	for _, h := range r.pending {
		if r.hosts[h.name] == nil {
			r.hosts[h.name] = h
		}
	}
	r.pending = nil
	r.sorted = nil
}

func (r *Registry) hostLocked(hostname string) *Host {
	if h := r.hosts[hostname]; h != nil {
		return h
	}
	h := &Host{name: hostname, today: &r.today}
	cur := r.today.Load()
	h.slots[cur&(ringSize-1)].day.Store(cur)
	r.hosts[hostname] = h
	r.sorted = nil
	return h
}

// sortedLocked returns every Host ordered by name (byte order).
func (r *Registry) sortedLocked() []*Host {
	r.indexPendingLocked()
	if r.sorted == nil {
		s := make([]*Host, 0, len(r.hosts))
		for _, h := range r.hosts {
			s = append(s, h)
		}
		slices.SortFunc(s, func(a, b *Host) int {
			switch {
			case a.name < b.name:
				return -1
			case a.name > b.name:
				return 1
			}
			return 0
		})
		r.sorted = s
	}
	return r.sorted
}

// Roll advances the current day to the day of now, if that is later; an earlier or equal
// day changes nothing. Run calls it at every UTC midnight; queries call it too.
func (r *Registry) Roll(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rollLocked(DayOf(now))
}

// rollLocked publishes day to the hot path. Before a day is published, its slot in every
// Host is emptied with atomic swaps (its old contents move to history) and tagged with
// the new day, so increments that still see the previous day land in the previous day's
// slot and none is lost. On a jump of ringSize days or more, a slot still being written
// for the old day gets reused; increments racing that exact moment are then counted on
// the new day, never dropped.
func (r *Registry) rollLocked(day Day) {
	next := uint32(day) + 1
	cur := r.today.Load()
	if next <= cur {
		return
	}
	r.indexPendingLocked() // their slots roll too
	// Only the last ringSize days of a jump can need a slot; walking them visits every
	// slot once, so a jump of years costs the same as a jump of four days.
	start := cur + 1
	if next-cur > ringSize {
		start = next - ringSize + 1
	}
	for d := start; d <= next; d++ {
		idx := d & (ringSize - 1)
		for name, h := range r.hosts {
			s := &h.slots[idx]
			old := s.day.Load()
			if c := s.take(); old != 0 && !c.IsZero() {
				r.archiveLocked(Day(old-1), name, c)
			}
			s.day.Store(d)
		}
		r.today.Store(d)
	}
	r.pruneLocked()
}

func (r *Registry) archiveLocked(d Day, host string, c Counters) {
	rec := r.history[d]
	if rec == nil {
		rec = &dayRecord{counts: make(map[string]Counters)}
		r.history[d] = rec
	}
	old, had := rec.counts[host]
	rec.counts[host] = old.Add(c)
	if !had {
		rec.names = nil
	}
}

// oldestLocked is the first day inside the retention window.
func (r *Registry) oldestLocked() Day {
	today := Day(r.today.Load() - 1)
	if int(today) < r.retention {
		return 0
	}
	return today - Day(r.retention) + 1
}

// pruneLocked drops history older than the retention window. Live slots are never older
// than ringSize days, far inside it; readers filter by oldestLocked all the same.
func (r *Registry) pruneLocked() {
	oldest := r.oldestLocked()
	for d := range r.history {
		if d < oldest {
			delete(r.history, d)
		}
	}
}

// isLiveLocked reports whether day d may still be held by live slots.
func (r *Registry) isLiveLocked(d Day) bool {
	today := Day(r.today.Load() - 1)
	return d <= today && d+ringSize > today
}

// countersLocked returns the counters of host h (which may be nil) on day d: its live
// slot, if it holds d, plus the archived or restored part.
func (r *Registry) countersLocked(d Day, name string, h *Host) Counters {
	var c Counters
	if h != nil && r.isLiveLocked(d) {
		if s := &h.slots[uint32(d+1)&(ringSize-1)]; s.day.Load() == uint32(d)+1 {
			c = s.load()
		}
	}
	if rec := r.history[d]; rec != nil {
		c = c.Add(rec.counts[name])
	}
	return c
}

// daysLocked returns the days from lo to hi (inclusive) that may hold entries, ascending.
func (r *Registry) daysLocked(lo, hi Day) []Day {
	if lo > hi {
		return nil
	}
	var days []Day
	for d := range r.history {
		if d >= lo && d <= hi {
			days = append(days, d)
		}
	}
	today := Day(r.today.Load() - 1)
	for i := Day(0); i < ringSize && i <= today; i++ {
		if d := today - i; d >= lo && d <= hi && r.history[d] == nil {
			days = append(days, d)
		}
	}
	slices.Sort(days)
	return days
}

// sortedNames returns the hostnames archived in rec, in byte order.
func (rec *dayRecord) sortedNames() []string {
	if rec.names == nil {
		rec.names = make([]string, 0, len(rec.counts))
		for n := range rec.counts {
			rec.names = append(rec.names, n)
		}
		sort.Strings(rec.names)
	}
	return rec.names
}

package stats

import (
	"sync"
	"sync/atomic"
	"time"
)

// Day is a UTC calendar day, counted from 1970-01-01 (day 0).
type Day uint32

// DayOf returns the UTC day that t falls on. Times before 1970 map to day 0.
func DayOf(t time.Time) Day {
	s := t.Unix()
	if s < 0 {
		return 0
	}
	return Day(s / 86400)
}

// Time returns midnight UTC at the start of d.
func (d Day) Time() time.Time { return time.Unix(int64(d)*86400, 0).UTC() }

// String formats d as YYYY-MM-DD.
func (d Day) String() string { return d.Time().Format(time.DateOnly) }

// ParseDay reads a YYYY-MM-DD day that exists on the calendar.
func ParseDay(s string) (Day, bool) {
	if len(s) != 10 {
		return 0, false
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil || t.Format(time.DateOnly) != s || t.Unix() < 0 {
		return 0, false
	}
	return DayOf(t), true
}

// DefaultRetentionDays is the contract's minimum retention, today included.
const DefaultRetentionDays = 35

// Options configure a Registry. The zero value is usable: it keeps
// DefaultRetentionDays and reads the wall clock.
type Options struct {
	// NodeID is stated in every statistics entry.
	NodeID string
	// RetentionDays is how many days (today included) are kept; zero or less means
	// DefaultRetentionDays, and values below it are raised to it.
	RetentionDays int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Registry owns every Host and the current day. Host creation, rollover, queries and
// snapshots take its mutex; recording through a Host never does.
type Registry struct {
	nodeID    string
	retention int
	now       func() time.Time

	today atomic.Uint32 // current Day+1, read by every Host on the hot path

	mu      sync.Mutex
	hosts   map[string]*Host
	history map[Day]map[string]Counters // days that left the live slots
}

// NewRegistry returns a registry whose current day is the day of opts.Now().
func NewRegistry(opts Options) *Registry {
	r := &Registry{
		nodeID:    opts.NodeID,
		retention: opts.RetentionDays,
		now:       opts.Now,
		hosts:     make(map[string]*Host),
		history:   make(map[Day]map[string]Counters),
	}
	if r.retention < DefaultRetentionDays {
		r.retention = DefaultRetentionDays
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.today.Store(uint32(DayOf(r.now())) + 1)
	return r
}

// NodeID returns the node id stated in statistics entries.
func (r *Registry) NodeID() string { return r.nodeID }

// Today returns the day counters are currently recorded under.
func (r *Registry) Today() Day { return Day(r.today.Load() - 1) }

// Host returns the counters of hostname, creating them on first use. It is a cold-path
// call (route-table compilation), safe for concurrent use.
func (r *Registry) Host(hostname string) *Host {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hostLocked(hostname)
}

func (r *Registry) hostLocked(hostname string) *Host {
	if h := r.hosts[hostname]; h != nil {
		return h
	}
	h := &Host{name: hostname, today: &r.today}
	cur := r.today.Load()
	h.slots[cur&(ringSize-1)].day.Store(cur)
	r.hosts[hostname] = h
	return h
}

// Roll advances the current day to the day of now, if that is later. Before the new day
// is published, its slot in every Host is emptied (its old contents, ringSize days old,
// move to history), so increments that still see the old day land in the old day's slot
// and none are misdated. Days beyond the retention are dropped.
func (r *Registry) Roll(now time.Time) {
	next := uint32(DayOf(now)) + 1
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.today.Load()
	if next <= cur {
		return
	}
	// Walk day by day so that a jump of several days archives every slot once.
	for d := cur + 1; d <= next; d++ {
		idx := d & (ringSize - 1)
		for name, h := range r.hosts {
			s := &h.slots[idx]
			if old := s.day.Load(); old != 0 {
				if c := s.load(); !c.IsZero() {
					r.archiveLocked(Day(old-1), name, c)
				}
			}
			s.store(Counters{})
			s.day.Store(d)
		}
		r.today.Store(d)
	}
	r.pruneLocked()
}

func (r *Registry) archiveLocked(d Day, host string, c Counters) {
	m := r.history[d]
	if m == nil {
		m = make(map[string]Counters)
		r.history[d] = m
	}
	m[host] = m[host].Add(c)
}

// pruneLocked drops history older than the retention window.
func (r *Registry) pruneLocked() {
	today := Day(r.today.Load() - 1)
	if int(today) < r.retention {
		return
	}
	oldest := today - Day(r.retention) + 1
	for d := range r.history {
		if d < oldest {
			delete(r.history, d)
		}
	}
}

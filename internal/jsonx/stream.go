package jsonx

import (
	"bytes"
	"io"
	"slices"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// Stream reads one large JSON text (a 100,000-route table) under the exact-schema rule
// with jsontext's Decoder doing all the scanning: syntax, UTF-8, repeated names, where
// each value ends. The caller walks the text once, value by value, and gets Go values
// without the text being copied or held: strings are copied out one by one (a repeated
// one, with Intern, once).
//
// Violations are collected in the Errors given to NewStream, each with its JSON path,
// which is only built when there is something to report ([Path]). A text that is not
// valid JSON stops the walk: every read returns zero values from then on, and Err returns
// the *SyntaxError that Parse would (the same line, column and words), which the caller
// reports instead of any violation collected so far.
//
// A name repeated in an object is such an error. The Decoder is spared tracking every
// name of every object: Obj.Next knows the names it has seen, Value checks what it
// returns, and a value read past unread (Skip) always comes with a violation, in which
// case Err checks the whole text as Parse does.
type Stream struct {
	d       *jsontext.Decoder
	data    []byte
	e       *Errors
	failed  bool
	interns map[string]string // Intern's strings
}

// maxInterned bounds Intern's table: past it strings are copied as they come (a table
// whose addresses are all different gains nothing from a large one).
const maxInterned = 4096

// NewStream starts reading data, which must stay unchanged until the walk is over;
// violations go to e.
func NewStream(data []byte, e *Errors) *Stream {
	return &Stream{d: jsontext.NewDecoder(bytes.NewBuffer(data), jsontext.AllowDuplicateNames(true)), data: data, e: e}
}

// Path is a JSON path as a chain of steps from the root, rendered by String only when a
// violation names it. The zero Path is the root; Key and Index make the steps below it.
// A Path refers to its parent: keep it on the stack, no longer than the parent.
type Path struct {
	parent *Path
	key    string
	index  int // an element index when key is ""
}

// Key returns the path of member key below p.
func (p *Path) Key(key string) Path { return Path{parent: p, key: key} }

// Index returns the path of element i below p.
func (p *Path) Index(i int) Path { return Path{parent: p, index: i} }

// String renders the path as Join and Index do ("routes[2].targets[0].port"; "" for the
// root). It copies what it needs, so that a Path and its parents can stay on the stack.
func (p *Path) String() string {
	depth := 0
	for q := p; q != nil && q.parent != nil; q = q.parent {
		depth++
	}
	var b []byte
	for level := depth; level > 0; level-- { // from the root down (paths are short)
		q := p
		for range level - 1 {
			q = q.parent
		}
		switch {
		case q.key == "":
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(q.index), 10)
			b = append(b, ']')
		case len(b) > 0:
			b = append(append(b, '.'), q.key...)
		default:
			b = append(b, q.key...)
		}
	}
	return string(b)
}

// Len returns the length of the text, for capacity hints.
func (s *Stream) Len() int { return len(s.data) }

// fail marks the text as invalid; Err says why.
func (s *Stream) fail() { s.failed = true }

// Err returns nil when everything read so far was valid JSON and, once the walk has read
// the top-level value, nothing but whitespace follows it; otherwise the *SyntaxError
// Parse returns for the text. Call it once, after the walk.
func (s *Stream) Err() error {
	if !s.failed {
		if _, err := s.d.ReadToken(); err != io.EOF {
			s.failed = true
		}
	}
	if !s.failed && s.e.Len() > 0 && !jsontext.Value(s.data).IsValid() {
		s.failed = true // a repeated name inside a value that was read past
	}
	if s.failed {
		_, err := Parse(s.data)
		if err == nil { // jsontext's Decoder and its validator agree; this cannot happen
			return &SyntaxError{Line: 1, Column: 1, Msg: "not one JSON value"}
		}
		return err
	}
	return nil
}

// Kind returns the kind of the next value: '"', '0', '{', '[', 't', 'f' or 'n', and 0 when
// the text is invalid there (or ends).
func (s *Stream) Kind() jsontext.Kind {
	if s.failed {
		return 0
	}
	k := s.d.PeekKind()
	if k == 0 {
		s.fail()
	}
	return k
}

// Skip reads past the next value.
func (s *Stream) Skip() {
	if s.failed {
		return
	}
	if err := s.d.SkipValue(); err != nil {
		s.fail()
	}
}

// raw reads the next value and returns its text, valid until the next read.
func (s *Stream) raw() jsontext.Value {
	if s.failed {
		return nil
	}
	v, err := s.d.ReadValue()
	if err != nil {
		s.fail()
		return nil
	}
	return v
}

// Value reads the next value and returns a copy of its text, to be read with the Value
// readers (small values: a certificate). It is checked as Parse checks a text.
func (s *Stream) Value() Value {
	v := s.raw()
	if !v.IsValid() { // a repeated name
		s.fail()
		return ""
	}
	return Value(v)
}

// wrong reports that the value at p is not of the wanted kind (what: "an object",
// "a string", ...) and reads past it.
func (s *Stream) wrong(p *Path, what string) {
	s.e.Addf("", "%s must be %s", Name(p.String()), what)
	s.Skip()
}

// String reads a string; another value is a violation at p ("must be a string").
func (s *Stream) String(p *Path) (string, bool) {
	if s.Kind() != '"' {
		if !s.failed {
			s.wrong(p, "a string")
		}
		return "", false
	}
	return unquoteBytes(s.raw(), nil), !s.failed
}

// Intern is String for values that repeat (addresses, certificate ids): each distinct
// string is allocated once per Stream.
func (s *Stream) Intern(p *Path) (string, bool) {
	if s.Kind() != '"' {
		if !s.failed {
			s.wrong(p, "a string")
		}
		return "", false
	}
	v := s.raw()
	if s.interns == nil {
		s.interns = make(map[string]string)
	}
	if str, ok := s.interns[string(v)]; ok { // no allocation for the lookup
		return str, true
	}
	str := unquoteBytes(v, nil)
	if len(s.interns) < maxInterned {
		s.interns[string(v)] = str
	}
	return str, !s.failed
}

// Bool reads a boolean; another value is a violation at p.
func (s *Stream) Bool(p *Path) (bool, bool) {
	switch s.Kind() {
	case 't', 'f':
		v := s.raw()
		return len(v) > 0 && v[0] == 't', !s.failed
	case 0:
		return false, false
	}
	s.wrong(p, "a boolean")
	return false, false
}

// Int reads an integer from min to max (as [Int] does: 80, 8e1 and 80.0 alike); another
// value is the violation "PATH must be an integer from MIN to MAX".
func (s *Stream) Int(p *Path, min, max int64) (int64, bool) {
	if n, ok := s.number(); ok && n >= min && n <= max {
		return n, true
	}
	if !s.failed {
		s.e.Addf("", "%s must be an integer from %d to %d", Name(p.String()), min, max)
	}
	return 0, false
}

// Counter reads a non-negative safe integer, as [Counter] does.
func (s *Stream) Counter(p *Path) (int64, bool) {
	if n, ok := s.number(); ok && n >= 0 && n <= MaxSafeInteger {
		return n, true
	}
	if !s.failed {
		s.e.Addf("", "%s must be a non-negative safe integer", Name(p.String()))
	}
	return 0, false
}

// number reads the next value as an integral number (AsInt); any other value is read
// past and reported as not one.
func (s *Stream) number() (int64, bool) {
	if s.Kind() != '0' {
		s.Skip()
		return 0, false
	}
	v := s.raw()
	if n := len(v); n > 0 && n <= 15 && (v[0] != '0' || n == 1) { // plain digits: the common case
		var x int64
		for _, c := range v {
			if c < '0' || c > '9' {
				x = -1
				break
			}
			x = x*10 + int64(c-'0')
		}
		if x >= 0 {
			return x, true
		}
	}
	return Value(v).AsInt()
}

// Array reads the '[' of an array; another value is a violation at p ("must be an
// array"), read past, and Array returns false. Read the elements while More.
func (s *Stream) Array(p *Path) bool {
	if s.Kind() != '[' {
		if !s.failed {
			s.wrong(p, "an array")
		}
		return false
	}
	if _, err := s.d.ReadToken(); err != nil {
		s.fail()
		return false
	}
	return true
}

// More reports whether the array or object being read has another element or member;
// when it has not, it reads the closing ']' or '}'.
func (s *Stream) More() bool {
	switch s.Kind() {
	case ']', '}':
		if _, err := s.d.ReadToken(); err != nil {
			s.fail()
		}
		return false
	case 0:
		return false
	}
	return true
}

// Object reads an object whose members may be the names of known, at p; another value
// is a violation at p ("must be an object"), read past, and ok is false. Read its members
// with Obj.Next, then call Obj.End with p and the names the object must hold.
func (s *Stream) Object(p *Path, known []string) (o Obj, ok bool) {
	if s.Kind() != '{' {
		if !s.failed {
			s.wrong(p, "an object")
		}
		return Obj{}, false
	}
	if _, err := s.d.ReadToken(); err != nil {
		s.fail()
		return Obj{}, false
	}
	return Obj{s: s, known: known, mark: s.e.Len()}, true
}

// Obj is an object being read (Stream.Object).
type Obj struct {
	s     *Stream
	known []string
	seen  uint64   // bit i: known[i] was a member
	extra []string // members not in known
	mark  int      // violations before the object's own
}

// Next reads the next member's name and returns its index in the known names, with its
// value next to be read (and read by the caller, whatever it is). Members not known are
// read past and remembered for End. ok is false after the last member.
func (o *Obj) Next() (i int, ok bool) {
	s := o.s
	for s.More() {
		name := s.raw()
		if s.failed {
			return 0, false
		}
		key := name[1 : len(name)-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			key = []byte(unquoteBytes(name, nil)) // an escaped name: rare
		}
		for i, k := range o.known {
			if k == string(key) {
				if o.Has(i) { // repeated
					s.fail()
					return 0, false
				}
				o.seen |= 1 << i
				return i, true
			}
		}
		if slices.Contains(o.extra, string(key)) {
			s.fail()
			return 0, false
		}
		o.extra = append(o.extra, string(key))
		s.Skip()
	}
	return 0, false
}

// Has reports whether known[i] was a member.
func (o *Obj) Has(i int) bool { return o.seen&(1<<i) != 0 }

// End reports, as [Object] does and before the violations found inside the object's
// values, each name of required that was not a member ("PATH.NAME is missing") and each
// member that required does not hold ("PATH.NAME is not allowed", sorted): known names
// outside required included, so that one read serves objects of several shapes.
func (o *Obj) End(p *Path, required []string) {
	if o.s == nil || o.s.failed {
		return
	}
	var missing []string
	var want uint64
	for _, r := range required {
		if i := slices.Index(o.known, r); i >= 0 && o.Has(i) {
			want |= 1 << i
		} else {
			missing = append(missing, r)
		}
	}
	extra := o.extra
	for i, k := range o.known {
		if o.Has(i) && want&(1<<i) == 0 {
			extra = append(extra, k)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return
	}
	path := p.String()
	var own Errors // worded as Object words them
	for _, k := range missing {
		own.Addf(Join(path, k), "is missing")
	}
	slices.Sort(extra)
	for _, k := range extra {
		own.Addf(Join(path, k), "is not allowed")
	}
	o.s.e.insert(o.mark, own.list)
}

// unquoteBytes appends the string that the quoted JSON string v holds to dst (nil: a new
// string's bytes) and returns it as a string.
func unquoteBytes(v []byte, dst []byte) string {
	if len(v) < 2 {
		return ""
	}
	body := v[1 : len(v)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body)
	}
	b, err := jsontext.AppendUnquote(dst, v)
	if err != nil { // not a checked string: cannot happen after the Decoder read it
		return ""
	}
	return string(b)
}

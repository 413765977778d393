package h1wire

import "bytes"

// ChunkScanner follows a chunked body as it passes through verbatim, to find its end
// and refuse a malformed one. It accepts only what net/http's own reader accepts, so that
// a Go client behind us never chokes on a body we relayed (FuzzChunkScanner): CRLF line
// ends, whitespace only at the end of a size line, at most 4094 bytes per size line
// (net/http reads them through a 4 KiB buffer), net/http's budget for extension
// overhead, and trailers that are header fields, 4 KiB in all.
type ChunkScanner struct {
	state      uint8
	digits     uint8
	size       int64 // remaining data bytes of the current chunk
	lineLen    int   // bytes of the current size line, CRLF excluded
	excess     int64 // non-data overhead beyond what net/http allows for free
	trailerLen int
	// Trailer collects the trailer section's lines ("Name: value\r\n" each) for
	// Decode; Scan leaves it alone.
	Trailer []byte
}

const (
	csSize uint8 = iota
	csSizeWS
	csExt
	csSizeLF
	csData
	csDataCR
	csDataLF
	csTrailerStart
	csTrailerName
	csTrailer
	csTrailerLF
	csEndLF
	csDone
)

const (
	maxChunkLine    = 4094
	maxTrailerBytes = 4096
	maxChunkExcess  = 16 << 10
)

// Scan consumes p and returns how many bytes of p belong to the body; done reports that
// the body ended within them.
func (s *ChunkScanner) Scan(p []byte) (n int, done bool, err error) {
	n, _, done, err = s.scan(p, false)
	return n, done, err
}

// Decode is Scan for a receiver that takes the body's content rather than its chunked
// form (an HTTP/2 client): the data bytes of p[:n] are moved to p[:data], in order, and
// the trailer section's lines are appended to s.Trailer.
func (s *ChunkScanner) Decode(p []byte) (n, data int, done bool, err error) {
	return s.scan(p, true)
}

func (s *ChunkScanner) scan(p []byte, dec bool) (n, d int, done bool, err error) {
	for n < len(p) {
		if s.state == csData {
			k := min(int64(len(p)-n), s.size)
			if dec {
				d += copy(p[d:], p[n:n+int(k)]) // d <= n: moving down never overwrites unread bytes
			}
			n += int(k)
			s.size -= k
			if s.size == 0 {
				s.state = csDataCR
			}
			continue
		}
		c := p[n]
		n++
		switch s.state {
		case csSize, csSizeWS, csExt:
			if c == '\r' {
				if s.digits == 0 {
					return n, d, false, ErrBadChunk
				}
				s.state = csSizeLF
				break
			}
			s.lineLen++
			if s.lineLen > maxChunkLine {
				return n, d, false, ErrChunkTooLarge
			}
			switch s.state {
			case csSize:
				if v := unhex(c); v >= 0 {
					if s.digits == 15 {
						return n, d, false, ErrChunkTooLarge
					}
					s.size = s.size<<4 | int64(v)
					s.digits++
					break
				}
				switch {
				case s.digits == 0:
					return n, d, false, ErrBadChunk
				case c == ';':
					s.state = csExt
				case c == ' ' || c == '\t':
					s.state = csSizeWS
				default:
					return n, d, false, ErrBadChunk
				}
			case csSizeWS: // only more whitespace before the CRLF
				if c != ' ' && c != '\t' {
					return n, d, false, ErrBadChunk
				}
			case csExt:
				if BadValueByte[c] {
					return n, d, false, ErrBadChunk
				}
			}
		case csSizeLF:
			if c != '\n' {
				return n, d, false, ErrBadChunk
			}
			s.excess = max(s.excess+int64(s.lineLen)+2-16-2*s.size, 0)
			if s.excess > maxChunkExcess {
				return n, d, false, ErrChunkTooLarge
			}
			s.digits, s.lineLen = 0, 0
			if s.size == 0 {
				s.state = csTrailerStart
			} else {
				s.state = csData
			}
		case csDataCR:
			if c != '\r' {
				return n, d, false, ErrBadChunk
			}
			s.state = csDataLF
		case csDataLF:
			if c != '\n' {
				return n, d, false, ErrBadChunk
			}
			s.state = csSize
		default: // trailers
			s.trailerLen++
			if s.trailerLen > maxTrailerBytes {
				return n, d, false, ErrChunkTooLarge
			}
			if dec && !(s.state == csTrailerStart && c == '\r') && s.state != csEndLF {
				s.Trailer = append(s.Trailer, c)
			}
			switch s.state {
			case csTrailerStart:
				switch {
				case c == '\r':
					s.state = csEndLF
				case Tchar[c]:
					s.state = csTrailerName
				default:
					return n, d, false, ErrBadChunk
				}
			case csTrailerName:
				switch {
				case c == ':':
					s.state = csTrailer
				case !Tchar[c]:
					return n, d, false, ErrBadChunk
				}
			case csTrailer:
				if c == '\r' {
					s.state = csTrailerLF
				} else if BadValueByte[c] {
					return n, d, false, ErrBadChunk
				}
			case csTrailerLF:
				if c != '\n' {
					return n, d, false, ErrBadChunk
				}
				s.state = csTrailerStart
			case csEndLF:
				if c != '\n' {
					return n, d, false, ErrBadChunk
				}
				s.state = csDone
				return n, d, true, nil
			default:
				return n, d, false, ErrBadChunk // csDone: nothing may follow
			}
		}
	}
	return n, d, false, nil
}

// EachTrailer calls f for every field of a trailer section collected by Decode, in
// order, with the value's surrounding whitespace trimmed. Decode admitted only lines of
// a token, a colon and a value.
func EachTrailer(section []byte, f func(name, value []byte)) {
	for len(section) > 0 {
		line := section
		if i := bytes.Index(section, crlf); i >= 0 {
			line, section = section[:i], section[i+2:]
		} else {
			section = nil
		}
		name, value, ok := bytes.Cut(line, colon)
		if !ok {
			continue
		}
		f(name, bytes.Trim(value, " \t"))
	}
}

var (
	crlf  = []byte("\r\n")
	colon = []byte(":")
)

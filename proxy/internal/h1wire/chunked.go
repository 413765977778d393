package h1wire

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
	for n < len(p) {
		if s.state == csData {
			k := min(int64(len(p)-n), s.size)
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
					return n, false, ErrBadChunk
				}
				s.state = csSizeLF
				break
			}
			s.lineLen++
			if s.lineLen > maxChunkLine {
				return n, false, ErrChunkTooLarge
			}
			switch s.state {
			case csSize:
				if v := unhex(c); v >= 0 {
					if s.digits == 15 {
						return n, false, ErrChunkTooLarge
					}
					s.size = s.size<<4 | int64(v)
					s.digits++
					break
				}
				switch {
				case s.digits == 0:
					return n, false, ErrBadChunk
				case c == ';':
					s.state = csExt
				case c == ' ' || c == '\t':
					s.state = csSizeWS
				default:
					return n, false, ErrBadChunk
				}
			case csSizeWS: // only more whitespace before the CRLF
				if c != ' ' && c != '\t' {
					return n, false, ErrBadChunk
				}
			case csExt:
				if BadValueByte[c] {
					return n, false, ErrBadChunk
				}
			}
		case csSizeLF:
			if c != '\n' {
				return n, false, ErrBadChunk
			}
			s.excess = max(s.excess+int64(s.lineLen)+2-16-2*s.size, 0)
			if s.excess > maxChunkExcess {
				return n, false, ErrChunkTooLarge
			}
			s.digits, s.lineLen = 0, 0
			if s.size == 0 {
				s.state = csTrailerStart
			} else {
				s.state = csData
			}
		case csDataCR:
			if c != '\r' {
				return n, false, ErrBadChunk
			}
			s.state = csDataLF
		case csDataLF:
			if c != '\n' {
				return n, false, ErrBadChunk
			}
			s.state = csSize
		default: // trailers
			s.trailerLen++
			if s.trailerLen > maxTrailerBytes {
				return n, false, ErrChunkTooLarge
			}
			switch s.state {
			case csTrailerStart:
				switch {
				case c == '\r':
					s.state = csEndLF
				case Tchar[c]:
					s.state = csTrailerName
				default:
					return n, false, ErrBadChunk
				}
			case csTrailerName:
				switch {
				case c == ':':
					s.state = csTrailer
				case !Tchar[c]:
					return n, false, ErrBadChunk
				}
			case csTrailer:
				if c == '\r' {
					s.state = csTrailerLF
				} else if BadValueByte[c] {
					return n, false, ErrBadChunk
				}
			case csTrailerLF:
				if c != '\n' {
					return n, false, ErrBadChunk
				}
				s.state = csTrailerStart
			case csEndLF:
				if c != '\n' {
					return n, false, ErrBadChunk
				}
				s.state = csDone
				return n, true, nil
			default:
				return n, false, ErrBadChunk // csDone: nothing may follow
			}
		}
	}
	return n, false, nil
}

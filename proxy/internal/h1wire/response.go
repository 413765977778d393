package h1wire

import (
	"bytes"
	"errors"

	"github.com/serve-zone/ingress/internal/ascii"
)

// Response heads.

// Response is a parsed response head.
type Response struct {
	Head          []byte
	Status        int
	ReasonS       uint32 // reason phrase is head[ReasonS:ReasonE]
	ReasonE       uint32
	HTTP10        bool
	ContentLength int64 // -1: none
	Chunked       bool
	ConnClose     bool
	KeepAlive     bool // "Connection: keep-alive" (matters for HTTP/1.0 targets)
	HasDate       bool
	Fields        []Field
}

var (
	ErrBadResponse   = errors.New("proxy: malformed response from target")
	ErrBadFraming    = errors.New("proxy: target response has conflicting or unsupported framing")
	ErrBadChunk      = errors.New("proxy: malformed chunked body from target")
	ErrChunkTooLarge = errors.New("proxy: chunk header or trailer from target too large")
	// ErrTooManyFields: the response has more fields than the storage given; the
	// caller parses again with more.
	ErrTooManyFields = errors.New("proxy: more response fields than the parser was given room for")
)

// ParseResponse parses head, a complete response head ending in CRLF CRLF.
func ParseResponse(r *Response, head []byte, fields []Field) error {
	*r = Response{Head: head, ContentLength: -1, Fields: fields[:0]}
	switch {
	case bytes.HasPrefix(head, []byte("HTTP/1.1 ")):
	case bytes.HasPrefix(head, []byte("HTTP/1.0 ")):
		r.HTTP10 = true
	default:
		return ErrBadResponse
	}
	i := len("HTTP/1.1 ")
	if i+3 > len(head) {
		return ErrBadResponse
	}
	for k := 0; k < 3; k++ {
		c := head[i+k]
		if c < '0' || c > '9' {
			return ErrBadResponse
		}
		r.Status = r.Status*10 + int(c-'0')
	}
	if r.Status < 100 {
		return ErrBadResponse
	}
	i += 3
	switch {
	case i+1 < len(head) && head[i] == '\r' && head[i+1] == '\n':
		r.ReasonS, r.ReasonE = uint32(i), uint32(i)
	case i < len(head) && head[i] == ' ':
		i++
		s := i
		for i < len(head) && !BadValueByte[head[i]] {
			i++
		}
		r.ReasonS, r.ReasonE = uint32(s), uint32(i)
		if i+1 >= len(head) || head[i] != '\r' || head[i+1] != '\n' {
			return ErrBadResponse
		}
	default:
		return ErrBadResponse
	}
	i += 2

	var cl int64 = -1
	named := false // a Connection field may name fields to drop
	for {
		if i+1 >= len(head) {
			return ErrBadResponse
		}
		if head[i] == '\r' && head[i+1] == '\n' {
			break
		}
		if len(r.Fields) == cap(r.Fields) {
			return ErrTooManyFields
		}
		f, next, fv := parseField(head, i)
		if fv != Fast {
			return ErrBadResponse
		}
		i = next
		name, val := f.Name(head), f.Value(head)
		f.Kind = responseFieldKind(name)
		switch f.Kind {
		case KindContentLength:
			n, ok := parseContentLength(val)
			if !ok || (cl >= 0 && n != cl) {
				return ErrBadFraming
			}
			cl = n
		case KindTransferEncoding:
			if r.Chunked || !ascii.EqualLower(val, "chunked") {
				return ErrBadFraming
			}
			r.Chunked = true
		case KindConnection:
			named = true
			if hasConnToken(val, "close") {
				r.ConnClose = true
			}
			if hasConnToken(val, "keep-alive") {
				r.KeepAlive = true
			}
		case KindDate:
			r.HasDate = true
		}
		r.Fields = append(r.Fields, f)
	}
	if r.Chunked && cl >= 0 {
		// RFC 9112 §6.3: Transfer-Encoding wins and Content-Length is not forwarded;
		// but which framing the target meant is unknown, so its connection is not
		// used again.
		r.ConnClose = true
		cl = -1
	}
	r.ContentLength = cl
	if r.HTTP10 && !r.KeepAlive {
		r.ConnClose = true
	}
	dropConnectionNamed(head, r.Fields)
	if r.HasDate && named {
		// A Date that Connection names is not forwarded: the front-end writes its own
		// (RFC 9110 §6.6.1), as net/http's server does once hop-by-hop fields are gone.
		r.HasDate = false
		for j := range r.Fields {
			r.HasDate = r.HasDate || r.Fields[j].Kind == KindDate
		}
	}
	for j := range r.Fields {
		if r.Fields[j].Kind == KindKeepAlive {
			r.Fields[j].Kind = KindDrop
		}
	}
	return nil
}

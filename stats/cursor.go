package stats

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
)

// A cursor is base64url (no padding) of
//
//	version(1) | last day(4, big endian) | last hostname | mac(16)
//
// where mac is HMAC-SHA256 under the registry's random per-process key over the version,
// the query's first and last day, the last day and hostname of the page. Binding the range in the MAC
// makes a cursor valid for that range only; the key makes it valid for this process only,
// so a forged, truncated or foreign cursor, or one from before a restart, is refused.
const (
	cursorVersion = 1
	cursorMACLen  = 16
	// maxCursorLen bounds the text we decode: a 253-byte hostname needs about 370.
	maxCursorLen = 1024
)

var cursorEncoding = base64.RawURLEncoding

func (r *Registry) cursorMAC(from, to, last Day, host string) []byte {
	m := hmac.New(sha256.New, r.cursorKey[:])
	var b [13]byte
	b[0] = cursorVersion
	binary.BigEndian.PutUint32(b[1:], uint32(from))
	binary.BigEndian.PutUint32(b[5:], uint32(to))
	binary.BigEndian.PutUint32(b[9:], uint32(last))
	m.Write(b[:])
	m.Write([]byte(host))
	return m.Sum(nil)[:cursorMACLen]
}

// encodeCursor returns the cursor that resumes the query (from, to) strictly after the
// entry (last, host).
func (r *Registry) encodeCursor(from, to, last Day, host string) string {
	b := make([]byte, 0, 5+len(host)+cursorMACLen)
	b = append(b, cursorVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(last))
	b = append(b, host...)
	b = append(b, r.cursorMAC(from, to, last, host)...)
	return cursorEncoding.EncodeToString(b)
}

// decodeCursor returns the entry a cursor resumes after, if this registry issued it for
// the query (from, to).
func (r *Registry) decodeCursor(c string, from, to Day) (Day, string, bool) {
	if len(c) == 0 || len(c) > maxCursorLen {
		return 0, "", false
	}
	b, err := cursorEncoding.DecodeString(c)
	if err != nil || len(b) < 5+cursorMACLen || b[0] != cursorVersion {
		return 0, "", false
	}
	last := Day(binary.BigEndian.Uint32(b[1:5]))
	host := string(b[5 : len(b)-cursorMACLen])
	if !hmac.Equal(b[len(b)-cursorMACLen:], r.cursorMAC(from, to, last, host)) {
		return 0, "", false
	}
	if last < from || last > to {
		return 0, "", false
	}
	return last, host, true
}

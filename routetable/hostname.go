package routetable

import "strings"

// maxHostnameLen is the longest hostname a route may name (contract §6).
const maxHostnameLen = 253

// NormalizeHost turns a Host header, :authority or SNI value into the form route
// hostnames use: ASCII lowercase, the port stripped, one trailing dot stripped. It reports
// false for a value that can never match a route (empty, too long, or an IPv6 literal).
// Every caller (proxy routing, SNI, statistics) goes through this one function.
func NormalizeHost(host string) (string, bool) {
	var buf [maxHostnameLen]byte
	b, ok := normalizeInto(buf[:0], host)
	if !ok {
		return "", false
	}
	if string(b) == host {
		return host, true
	}
	return string(b), true
}

// normalizeInto appends the normalised host to dst (which must have capacity for
// maxHostnameLen bytes so that nothing escapes to the heap).
func normalizeInto(dst []byte, host string) ([]byte, bool) {
	if strings.HasPrefix(host, "[") {
		return nil, false // IPv6 literal: no route names one
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		host = host[:i]
	}
	if n := len(host); n > 0 && host[n-1] == '.' {
		host = host[:n-1]
	}
	if len(host) == 0 || len(host) > maxHostnameLen {
		return nil, false
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst, true
}

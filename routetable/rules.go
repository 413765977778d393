package routetable

import "strings"

// Limits of contract §6.
const (
	MaxRoutes          = 100_000
	MaxTargetsPerRoute = 64
	MaxCertificates    = 10_000
)

// ValidHostname reports whether s is a route hostname of contract §6: a lowercase A-label
// DNS name without trailing dot, at most 253 characters, labels of 1–63 [a-z0-9-] that
// neither start nor end with '-'; or "*." followed by such a name, 253 characters in all.
func ValidHostname(s string) bool {
	if len(s) > maxHostnameLen {
		return false
	}
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		return validDNSName(rest)
	}
	return validDNSName(s)
}

func validDNSName(s string) bool {
	if s == "" {
		return false
	}
	label := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if label == 0 || s[i-1] == '-' {
				return false
			}
			label = 0
			continue
		case 'a' <= c && c <= 'z' || '0' <= c && c <= '9':
		case c == '-':
			if label == 0 {
				return false
			}
		default:
			return false
		}
		label++
		if label > 63 {
			return false
		}
	}
	return label > 0 && s[len(s)-1] != '-'
}

// ValidTargetAddress reports whether s is a target address of contract §6: a dotted-quad
// IPv4 address without leading zeros, outside 0.0.0.0/8, 224.0.0.0/4 and 240.0.0.0/4.
func ValidTargetAddress(s string) bool {
	var first int
	i := 0
	for part := 0; part < 4; part++ {
		start, v := i, 0
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			v = v*10 + int(s[i]-'0')
			i++
			if i-start > 3 {
				return false
			}
		}
		if i == start || s[start] == '0' && i-start > 1 || v > 255 {
			return false
		}
		if part == 0 {
			first = v
		}
		if part < 3 {
			if i >= len(s) || s[i] != '.' {
				return false
			}
			i++
		}
	}
	return i == len(s) && first != 0 && first < 224
}

// compareTargets orders targets by address as a string (byte order), then port as a number.
func compareTargets(a, b *Target) int {
	if c := strings.Compare(a.Address, b.Address); c != 0 {
		return c
	}
	return a.Port - b.Port
}

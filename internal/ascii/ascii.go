// Package ascii is the one ASCII case fold of the module's HTTP code: field names,
// tokens and options compare and lower-case in ASCII only (RFC 9110 §5.1), never by
// Unicode's rules. It allocates nothing.
package ascii

// Lower returns c in lower case when it is an ASCII capital.
func Lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		c += 'a' - 'A'
	}
	return c
}

// EqualLower reports whether s equals lower, an ASCII lower-case string, ignoring ASCII
// case (only s is folded: the common case of a known name, at half the work).
func EqualLower[T string | []byte](s T, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(lower); i++ {
		if Lower(s[i]) != lower[i] {
			return false
		}
	}
	return true
}

// EqualFold reports whether a and b are equal ignoring ASCII case.
func EqualFold[A, B string | []byte](a A, b B) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if Lower(a[i]) != Lower(b[i]) {
			return false
		}
	}
	return true
}

// AppendLower appends s to b in ASCII lower case.
func AppendLower[T string | []byte](b []byte, s T) []byte {
	for i := 0; i < len(s); i++ {
		b = append(b, Lower(s[i]))
	}
	return b
}

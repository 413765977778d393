package ascii

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestFoldIsASCII checks every function against the standard library's fold on ASCII
// (strings.ToLower), and that no byte beyond ASCII folds (0xC4 and 0xE4 are Ä and ä in
// Latin-1, 0x20 apart like an ASCII pair).
func TestFoldIsASCII(t *testing.T) {
	for c := 0; c < 256; c++ {
		want := byte(c)
		if c < utf8.RuneSelf {
			want = strings.ToLower(string(rune(c)))[0]
		}
		if got := Lower(byte(c)); got != want {
			t.Errorf("Lower(%#x) = %#x, want %#x", c, got, want)
		}
	}
	for _, tc := range []struct {
		a, b  string
		equal bool
	}{
		{"Content-Length", "content-length", true},
		{"CONTENT-LENGTH", "content-length", true},
		{"content-lengtH", "content-length", true},
		{"content-lengt", "content-length", false},
		{"content_length", "content-length", false},
		{"\xc4", "\xe4", false},
		{"", "", true},
		{"@", "`", false}, // the bytes beside 'A' and 'Z' do not fold
		{"[", "{", false},
	} {
		if got := EqualLower(tc.a, tc.b); got != tc.equal {
			t.Errorf("EqualLower(%q, %q) = %v", tc.a, tc.b, got)
		}
		if got := EqualLower([]byte(tc.a), tc.b); got != tc.equal {
			t.Errorf("EqualLower([]byte(%q), %q) = %v", tc.a, tc.b, got)
		}
		if got := EqualFold(tc.b, []byte(tc.a)); got != tc.equal {
			t.Errorf("EqualFold(%q, %q) = %v", tc.b, tc.a, got)
		}
		if tc.equal {
			if got := string(AppendLower([]byte("x:"), tc.a)); got != "x:"+tc.b {
				t.Errorf("AppendLower(%q) = %q", tc.a, got)
			}
		}
	}
}

// TestFoldAllocatesNothing: the fold is on every request's hot path.
func TestFoldAllocatesNothing(t *testing.T) {
	b := make([]byte, 0, 64)
	name := []byte("X-Forwarded-For")
	if n := testing.AllocsPerRun(100, func() {
		_ = EqualLower(name, "x-forwarded-for")
		_ = EqualFold("Upgrade", name)
		b = AppendLower(b[:0], name)
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

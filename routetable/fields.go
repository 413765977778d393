package routetable

import "github.com/serve-zone/ingress/internal/jsonx"

// Leaf readers for the route table's hot decode: the common, well-typed value costs no
// path string; a wrong one is reported by jsonx with the path built only then.

func str(v jsonx.Value, parent, key string, e *jsonx.Errors) string {
	if s, ok := v.AsString(); ok {
		return s
	}
	s, _ := jsonx.String(v, jsonx.Join(parent, key), e)
	return s
}

func boolean(v jsonx.Value, parent, key string, e *jsonx.Errors) bool {
	if b, ok := v.AsBool(); ok {
		return b
	}
	b, _ := jsonx.Bool(v, jsonx.Join(parent, key), e)
	return b
}

// integer reads an integer in [min, max].
func integer(v jsonx.Value, parent, key string, e *jsonx.Errors, min, max int64) int64 {
	if n, ok := v.AsInt(); ok && n >= min && n <= max {
		return n
	}
	n, _ := jsonx.Int(v, jsonx.Join(parent, key), e, min, max)
	return n
}

// counter reads a non-negative safe integer.
func counter(v jsonx.Value, parent, key string, e *jsonx.Errors) (int64, bool) {
	if n, ok := v.AsInt(); ok && n >= 0 && n <= jsonx.MaxSafeInteger {
		return n, true
	}
	return jsonx.Counter(v, jsonx.Join(parent, key), e)
}

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

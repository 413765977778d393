package routetable

// The JSON Schema of the standalone file (docs/routes.schema.json) is checked here: every
// example the docs show validates against it and is accepted by the ingress's own loader,
// and the schema and the loader agree on a corpus of good and bad files. The schema is
// read by a small checker of the draft 2020-12 keywords it uses (below); a keyword the
// checker does not know fails the test, so the schema cannot silently use one it ignores.
// (A test-only checker rather than a module: the schema needs a dozen keywords, and the
// module graph of the binary stays as it is.)

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/serve-zone/ingress/internal/testcert"
)

// schemaChecker validates JSON values against one schema document.
type schemaChecker struct {
	root     map[string]any
	patterns map[string]*regexp.Regexp
}

// annotations are keywords that do not constrain a value.
var annotations = map[string]bool{"$schema": true, "$id": true, "title": true, "description": true,
	"$comment": true, "default": true, "examples": true, "$defs": true}

func newSchemaChecker(t *testing.T, data []byte) *schemaChecker {
	t.Helper()
	var root map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		t.Fatalf("schema: %v", err)
	}
	if root["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Fatalf("schema: $schema %v, want draft 2020-12", root["$schema"])
	}
	c := &schemaChecker{root: root, patterns: map[string]*regexp.Regexp{}}
	c.compile(t, root, "#")
	return c
}

// compile checks that the schema uses only known keywords and compiles its patterns.
func (c *schemaChecker) compile(t *testing.T, s map[string]any, at string) {
	t.Helper()
	for k, v := range s {
		switch k {
		case "type", "required", "enum", "const", "minItems", "maxItems", "minimum", "maximum",
			"minLength", "maxLength", "$ref":
		case "pattern":
			re, err := regexp.Compile(v.(string))
			if err != nil {
				t.Fatalf("schema %s: pattern: %v", at, err)
			}
			c.patterns[v.(string)] = re
		case "properties", "$defs":
			for name, sub := range v.(map[string]any) {
				c.compile(t, sub.(map[string]any), at+"/"+k+"/"+name)
			}
		case "items", "additionalProperties", "not":
			if sub, ok := v.(map[string]any); ok {
				c.compile(t, sub, at+"/"+k)
			} else if _, ok := v.(bool); !ok {
				t.Fatalf("schema %s: %s must be a schema", at, k)
			}
		case "oneOf", "anyOf", "allOf":
			for i, sub := range v.([]any) {
				c.compile(t, sub.(map[string]any), fmt.Sprintf("%s/%s/%d", at, k, i))
			}
		default:
			if !annotations[k] {
				t.Fatalf("schema %s: keyword %q is not known to this checker", at, k)
			}
		}
	}
}

// validate returns every problem of v against the root schema, each with its JSON path.
func (c *schemaChecker) validate(v any) []string {
	var out []string
	c.check(c.root, v, "", &out)
	return out
}

func (c *schemaChecker) resolve(ref string) map[string]any {
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	if !ok {
		panic("unsupported $ref " + ref)
	}
	return c.root["$defs"].(map[string]any)[name].(map[string]any)
}

func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case json.Number:
		f, _, err := big.ParseFloat(string(v), 10, 200, big.ToNearestEven)
		if err == nil && f.IsInt() {
			return "integer"
		}
		return "number"
	}
	return "?"
}

func (c *schemaChecker) check(s map[string]any, v any, path string, out *[]string) {
	bad := func(format string, args ...any) {
		p := path
		if p == "" {
			p = "(root)"
		}
		*out = append(*out, p+": "+fmt.Sprintf(format, args...))
	}
	if ref, ok := s["$ref"].(string); ok {
		c.check(c.resolve(ref), v, path, out)
	}
	if ty, ok := s["type"]; ok {
		got := jsonType(v)
		var want []string
		switch ty := ty.(type) {
		case string:
			want = []string{ty}
		case []any:
			for _, x := range ty {
				want = append(want, x.(string))
			}
		}
		match := false
		for _, w := range want {
			if w == got || w == "number" && got == "integer" {
				match = true
			}
		}
		if !match {
			bad("is %s, want %v", got, want)
			return
		}
	}
	if cv, ok := s["const"]; ok && !jsonEqual(cv, v) {
		bad("must be %v", cv)
	}
	if ev, ok := s["enum"].([]any); ok {
		found := false
		for _, e := range ev {
			found = found || jsonEqual(e, v)
		}
		if !found {
			bad("must be one of %v", ev)
		}
	}
	switch v := v.(type) {
	case string:
		n := utf8.RuneCountInString(v)
		if m, ok := s["minLength"]; ok && n < num(m) {
			bad("shorter than %v", m)
		}
		if m, ok := s["maxLength"]; ok && n > num(m) {
			bad("longer than %v", m)
		}
		if p, ok := s["pattern"].(string); ok && !c.patterns[p].MatchString(v) {
			bad("does not match %s", p)
		}
	case json.Number:
		f, _, _ := big.ParseFloat(string(v), 10, 200, big.ToNearestEven)
		if m, ok := s["minimum"]; ok {
			mf, _, _ := big.ParseFloat(string(m.(json.Number)), 10, 200, big.ToNearestEven)
			if f.Cmp(mf) < 0 {
				bad("less than %v", m)
			}
		}
		if m, ok := s["maximum"]; ok {
			mf, _, _ := big.ParseFloat(string(m.(json.Number)), 10, 200, big.ToNearestEven)
			if f.Cmp(mf) > 0 {
				bad("greater than %v", m)
			}
		}
	case []any:
		if m, ok := s["minItems"]; ok && len(v) < num(m) {
			bad("fewer than %v items", m)
		}
		if m, ok := s["maxItems"]; ok && len(v) > num(m) {
			bad("more than %v items", m)
		}
		if items, ok := s["items"].(map[string]any); ok {
			for i, e := range v {
				c.check(items, e, path+"["+strconv.Itoa(i)+"]", out)
			}
		}
	case map[string]any:
		if req, ok := s["required"].([]any); ok {
			for _, k := range req {
				if _, ok := v[k.(string)]; !ok {
					bad("%s is missing", k)
				}
			}
		}
		props, _ := s["properties"].(map[string]any)
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub := joinPath(path, k)
			if p, ok := props[k]; ok {
				c.check(p.(map[string]any), v[k], sub, out)
				continue
			}
			switch ap := s["additionalProperties"].(type) {
			case bool:
				if !ap {
					bad("%s is not allowed", k)
				}
			case map[string]any:
				c.check(ap, v[k], sub, out)
			}
		}
	}
	if subs, ok := s["allOf"].([]any); ok {
		for _, sub := range subs {
			c.check(sub.(map[string]any), v, path, out)
		}
	}
	if subs, ok := s["anyOf"].([]any); ok {
		n := c.matching(subs, v, path)
		if n == 0 {
			bad("matches none of anyOf")
		}
	}
	if subs, ok := s["oneOf"].([]any); ok {
		if n := c.matching(subs, v, path); n != 1 {
			bad("matches %d of oneOf, want exactly 1", n)
		}
	}
	if sub, ok := s["not"].(map[string]any); ok {
		var o []string
		c.check(sub, v, path, &o)
		if len(o) == 0 {
			bad("matches not")
		}
	}
}

func (c *schemaChecker) matching(subs []any, v any, path string) int {
	n := 0
	for _, sub := range subs {
		var o []string
		c.check(sub.(map[string]any), v, path, &o)
		if len(o) == 0 {
			n++
		}
	}
	return n
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func num(v any) int {
	n, err := strconv.Atoi(string(v.(json.Number)))
	if err != nil {
		panic(err)
	}
	return n
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func decodeAny(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	return v
}

func loadSchema(t *testing.T) *schemaChecker {
	t.Helper()
	data, err := os.ReadFile("../docs/routes.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return newSchemaChecker(t, data)
}

// jsonBlocks returns the ```json code blocks of a Markdown file that hold a route table.
func jsonBlocks(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	rest := string(data)
	for {
		i := strings.Index(rest, "```json\n")
		if i < 0 {
			return out
		}
		rest = rest[i+len("```json\n"):]
		j := strings.Index(rest, "```")
		if j < 0 {
			t.Fatalf("%s: unterminated code block", path)
		}
		if block := rest[:j]; strings.Contains(block, `"routes"`) {
			out = append(out, block)
		}
		rest = rest[j+3:]
	}
}

// withCertificateFiles writes, into a new directory, a certificate (and key) for every
// certificateFile (privateKeyFile) the table names, covering the hostnames of the routes
// that use it, and returns the directory.
func withCertificateFiles(t *testing.T, doc []byte) string {
	t.Helper()
	var tb struct {
		Routes []struct {
			Hostname string `json:"hostname"`
			TLS      *struct {
				CertificateID string `json:"certificateId"`
			} `json:"tls"`
		} `json:"routes"`
		Certificates []struct {
			ID              string `json:"id"`
			CertificateFile string `json:"certificateFile"`
			PrivateKeyFile  string `json:"privateKeyFile"`
		} `json:"certificates"`
	}
	if err := json.Unmarshal(doc, &tb); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range tb.Certificates {
		if c.CertificateFile == "" {
			continue
		}
		var hosts []string
		for _, r := range tb.Routes {
			if r.TLS != nil && r.TLS.CertificateID == c.ID {
				hosts = append(hosts, r.Hostname)
			}
		}
		cert, key, err := testcert.Generate(hosts...)
		if err != nil {
			t.Fatal(err)
		}
		for name, content := range map[string]string{c.CertificateFile: cert, c.PrivateKeyFile: key} {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// TestDocsExamplesMatchSchemaAndLoader: every route file the docs show (docs/examples,
// and the JSON blocks of docs/*.md and README.md) validates against the schema
// and is accepted by LoadFile, the loader of the running ingress.
func TestDocsExamplesMatchSchemaAndLoader(t *testing.T) {
	schema := loadSchema(t)
	examples := map[string]string{}
	files, err := filepath.Glob("../docs/examples/*.json")
	if err != nil || len(files) < 2 {
		t.Fatalf("docs/examples: %v %v", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		examples[f] = string(data)
	}
	// docs/standalone.md shows route files (the README points at it); any other page
	// that shows one is held to the same rules.
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, md := range append(pages, "../README.md") {
		blocks := jsonBlocks(t, md)
		if len(blocks) == 0 && md == "../docs/standalone.md" {
			t.Fatalf("%s shows no route file", md)
		}
		for i, b := range blocks {
			examples[fmt.Sprintf("%s block %d", md, i+1)] = b
		}
	}
	for name, doc := range examples {
		t.Run(name, func(t *testing.T) {
			if problems := schema.validate(decodeAny(t, []byte(doc))); len(problems) > 0 {
				t.Fatalf("refused by the schema:\n%s", strings.Join(problems, "\n"))
			}
			dir := withCertificateFiles(t, []byte(doc))
			path := filepath.Join(dir, "routes.json")
			if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadFile(path); err != nil {
				t.Fatalf("refused by the loader: %v", err)
			}
		})
	}
}

// TestSchemaAgreesWithDecoder: for files whose verdict the schema can reach (shape and
// per-value rules, not uniqueness, references or certificate content), the schema and the
// ingress's loader agree.
func TestSchemaAgreesWithDecoder(t *testing.T) {
	schema := loadSchema(t)
	dir := t.TempDir()
	writeCertFiles(t, dir, "c", testcert.Options{Hosts: []string{"a.test"}})
	tgt := `{"leaseId":"l","address":"127.0.0.1","port":80}`
	route := func(host, targets, tls string) string {
		return `{"hostname":` + strconv.Quote(host) + `,"targets":[` + targets + `],"tls":` + tls + `}`
	}
	table := func(rev string, routes ...string) string {
		return `{"revision":` + rev + `,"routes":[` + strings.Join(routes, ",") + `],"certificates":[]}`
	}
	withCert := func(cert string) string {
		return `{"revision":1,"routes":[` + route("a.test", tgt, `{"certificateId":"c","redirectHttp":true}`) + `],"certificates":[` + cert + `]}`
	}
	cases := []struct {
		name, doc string
		valid     bool
	}{
		{"empty table", table("0"), true},
		{"plain route", table("1", route("a.test", tgt, "null")), true},
		{"wildcard", table("1", route("*.a.test", tgt, "null")), true},
		{"acme", table("1", route("a.test", tgt, `{"acme":true,"redirectHttp":false}`)), true},
		{"revision as 8e1", table("8e1", route("a.test", tgt, "null")), true},
		{"revision max", table("9007199254740991"), true},
		{"certificate files", withCert(`{"id":"c","certificateFile":"c.crt","privateKeyFile":"c.key"}`), true},
		{"address edges", table("1", route("a.test", `{"leaseId":"l","address":"223.255.255.255","port":65535},{"leaseId":"l","address":"1.0.0.0","port":1}`, "null")), true},
		{"label of 63", table("1", route(strings.Repeat("a", 63)+".test", tgt, "null")), true},

		{"revision negative", table("-1"), false},
		{"revision fraction", table("1.5"), false},
		{"revision too big", table("9007199254740992"), false},
		{"missing routes", `{"revision":1,"certificates":[]}`, false},
		{"extra key", `{"revision":1,"routes":[],"certificates":[],"$schema":"x"}`, false},
		{"uppercase host", table("1", route("A.test", tgt, "null")), false},
		{"trailing dot", table("1", route("a.test.", tgt, "null")), false},
		{"label of 64", table("1", route(strings.Repeat("a", 64)+".test", tgt, "null")), false},
		{"hyphen edge", table("1", route("-a.test", tgt, "null")), false},
		{"double wildcard", table("1", route("*.*.a.test", tgt, "null")), false},
		{"no targets", table("1", route("a.test", "", "null")), false},
		{"leading zero", table("1", route("a.test", `{"leaseId":"l","address":"10.0.0.05","port":80}`, "null")), false},
		{"zero network", table("1", route("a.test", `{"leaseId":"l","address":"0.1.2.3","port":80}`, "null")), false},
		{"multicast", table("1", route("a.test", `{"leaseId":"l","address":"224.0.0.1","port":80}`, "null")), false},
		{"octet 256", table("1", route("a.test", `{"leaseId":"l","address":"10.0.0.256","port":80}`, "null")), false},
		{"port 0", table("1", route("a.test", `{"leaseId":"l","address":"10.0.0.1","port":0}`, "null")), false},
		{"port string", table("1", route("a.test", `{"leaseId":"l","address":"10.0.0.1","port":"80"}`, "null")), false},
		{"lease id", table("1", route("a.test", `{"leaseId":"_l","address":"10.0.0.1","port":80}`, "null")), false},
		{"tls missing", `{"revision":1,"routes":[{"hostname":"a.test","targets":[` + tgt + `]}],"certificates":[]}`, false},
		{"acme false", table("1", route("a.test", tgt, `{"acme":false,"redirectHttp":false}`)), false},
		{"acme and id", table("1", route("a.test", tgt, `{"acme":true,"certificateId":"c","redirectHttp":false}`)), false},
		{"redirect missing", table("1", route("a.test", tgt, `{"certificateId":"c"}`)), false},
		{"pem and file", withCert(`{"id":"c","certificatePem":"x","certificateFile":"c.crt","privateKeyFile":"c.key"}`), false},
		{"no key", withCert(`{"id":"c","certificateFile":"c.crt"}`), false},
		{"unknown certificate key", withCert(`{"id":"c","certificateFile":"c.crt","privateKeyFile":"c.key","chainFile":"x"}`), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			problems := schema.validate(decodeAny(t, []byte(tc.doc)))
			tb, _, err := DecodeFile([]byte(tc.doc), dir)
			if err == nil {
				_, err = Validate(tb, ModeStandalone)
			}
			if (len(problems) == 0) != tc.valid || (err == nil) != tc.valid {
				t.Fatalf("want valid=%v; schema says %q, loader says %v", tc.valid, problems, err)
			}
		})
	}
}

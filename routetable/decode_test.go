package routetable

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// examplesDir holds copies of the contract's examples (../shared/contract/examples).
const examplesDir = "testdata/examples"

// exampleTables returns every table the contract's examples hold, by name.
func exampleTables(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	data, err := os.ReadFile(filepath.Join(examplesDir, "route-table.json"))
	if err != nil {
		t.Fatal(err)
	}
	out["route-table.json"] = data
	data, err = os.ReadFile(filepath.Join(examplesDir, "get-route-table-response.json"))
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Response struct {
			Table json.RawMessage `json:"table"`
		} `json:"response"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatal(err)
	}
	out["get-route-table-response.json response.table"] = env.Response.Table
	return out
}

func TestExamplesDecodeAndValidate(t *testing.T) {
	for name, data := range exampleTables(t) {
		t.Run(name, func(t *testing.T) {
			for _, mode := range []Mode{ModeRelay, ModeStandalone} {
				tab, err := Decode(data, mode)
				if err != nil {
					t.Fatalf("%v: %v", mode, err)
				}
				warnings, err := Validate(tab, mode)
				if err != nil {
					t.Fatalf("%v: %v", mode, err)
				}
				t.Logf("warnings: %q", warnings)
				if tab.Revision != 7 || len(tab.Routes) != 3 || len(tab.Certificates) != 1 {
					t.Fatalf("decoded %d routes %d certificates revision %d", len(tab.Routes), len(tab.Certificates), tab.Revision)
				}
				s := NewStore(StoreOptions{Mode: mode})
				if err := s.Apply(tab); err != nil {
					t.Fatal(err)
				}
				c := s.Load()
				for host, want := range map[string]string{
					"api.example.test":   "api.example.test",
					"www.example.test":   "*.example.test",
					"plain.example.test": "plain.example.test",
					"example.test":       "",
				} {
					e := c.Lookup(host)
					if got := hostOf(e); got != want {
						t.Errorf("Lookup(%q) = %q, want %q", host, got, want)
					}
				}
				if c.GetCertificate("www.example.test") == nil || c.GetCertificate("plain.example.test") != nil {
					t.Error("GetCertificate does not follow the routes")
				}
			}
		})
	}
}

func hostOf(e *Entry) string {
	if e == nil {
		return ""
	}
	return e.Hostname
}

func TestDecodeSchemaViolations(t *testing.T) {
	cases := []struct {
		name string
		mode Mode
		json string
		want []string
	}{
		{"not json", ModeRelay, `{`, []string{"line 1, column 2: the route table is not valid JSON: unexpected end of JSON input"}},
		{"trailing comma", ModeStandalone, "{\n  \"revision\": 1,\n  \"routes\": [],\n}",
			[]string{"line 4, column 1: the route table is not valid JSON: invalid character '}' looking for beginning of object key string"}},
		{"column counts characters", ModeStandalone, "{\"revision\": 1, \"x\": \"äöü\" \"routes\": []}",
			[]string{"line 1, column 28: the route table is not valid JSON: invalid character '\"' after object key:value pair"}},
		{"empty", ModeStandalone, ``, []string{"line 1, column 1: the route table is not valid JSON: unexpected end of JSON input"}},
		{"file keys outside DecodeFile", ModeStandalone,
			`{"revision":1,"routes":[],"certificates":[{"id":"c","certificateFile":"a.pem","privateKeyPem":"k"}]}`,
			[]string{"certificates[0].certificatePem is missing", "certificates[0].certificateFile is not allowed"}},
		{"not an object", ModeRelay, `[]`, []string{"the value must be an object"}},
		{"missing keys", ModeRelay, `{}`, []string{"revision is missing", "routes is missing", "certificates is missing"}},
		{"extra key", ModeRelay, `{"revision":1,"routes":[],"certificates":[],"x":1}`, []string{"x is not allowed"}},
		{"revision negative", ModeRelay, `{"revision":-1,"routes":[],"certificates":[]}`, []string{"revision must be a non-negative safe integer"}},
		{"revision fraction", ModeRelay, `{"revision":1.5,"routes":[],"certificates":[]}`, []string{"revision must be a non-negative safe integer"}},
		{"revision too big", ModeRelay, `{"revision":9007199254740992,"routes":[],"certificates":[]}`, []string{"revision must be a non-negative safe integer"}},
		{"routes null", ModeRelay, `{"revision":1,"routes":null,"certificates":[]}`, []string{"routes must be an array"}},
		{"route wrong types", ModeRelay,
			`{"revision":1,"routes":[{"hostname":1,"targets":{},"tls":"x"}],"certificates":[]}`,
			[]string{"routes[0].hostname must be a string", "routes[0].targets must be an array", "routes[0].tls must be an object"}},
		{"route missing tls", ModeRelay,
			`{"revision":1,"routes":[{"hostname":"a.test","targets":[{"leaseId":"l","address":"127.0.0.1","port":1}]}],"certificates":[]}`,
			[]string{"routes[0].tls is missing"}},
		{"target wrong", ModeRelay,
			`{"revision":1,"routes":[{"hostname":"a.test","targets":[{"leaseId":null,"address":7,"port":"80","x":1}],"tls":null}],"certificates":[]}`,
			[]string{"routes[0].targets[0].x is not allowed", "routes[0].targets[0].leaseId must be a string",
				"routes[0].targets[0].address must be a string", "routes[0].targets[0].port must be an integer from 1 to 65535"}},
		{"port out of range", ModeRelay,
			`{"revision":1,"routes":[{"hostname":"a.test","targets":[{"leaseId":"l","address":"127.0.0.1","port":65536}],"tls":null}],"certificates":[]}`,
			[]string{"routes[0].targets[0].port must be an integer from 1 to 65535"}},
		{"tls missing redirect", ModeRelay,
			`{"revision":1,"routes":[{"hostname":"a.test","targets":[],"tls":{"certificateId":"c"}}],"certificates":[]}`,
			[]string{"routes[0].tls.redirectHttp is missing"}},
		{"acme in relay mode", ModeRelay,
			`{"revision":1,"routes":[{"hostname":"a.test","targets":[],"tls":{"acme":true,"redirectHttp":true}}],"certificates":[]}`,
			[]string{"routes[0].tls.certificateId is missing", "routes[0].tls.acme is not allowed"}},
		{"acme false", ModeStandalone,
			`{"revision":1,"routes":[{"hostname":"a.test","targets":[],"tls":{"acme":false,"redirectHttp":true}}],"certificates":[]}`,
			[]string{"routes[0].tls.acme must be true"}},
		{"acme with certificateId", ModeStandalone,
			`{"revision":1,"routes":[{"hostname":"a.test","targets":[],"tls":{"acme":true,"certificateId":"c","redirectHttp":true}}],"certificates":[]}`,
			[]string{"routes[0].tls.certificateId is not allowed"}},
		{"certificate wrong", ModeRelay,
			`{"revision":1,"routes":[],"certificates":[{"id":1,"certificatePem":[],"privateKeyPem":null}, 3]}`,
			[]string{"certificates[0].id must be a string", "certificates[0].certificatePem must be a string",
				"certificates[0].privateKeyPem must be a string", "certificates[1] must be an object"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := Decode([]byte(tc.json), tc.mode)
			if err == nil || tab != nil {
				t.Fatalf("accepted: %+v", tab)
			}
			if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrStale) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			var re *Error
			errors.As(err, &re)
			for _, w := range tc.want {
				if !slices.Contains(re.Violations, w) {
					t.Errorf("missing violation %q in\n%s", w, strings.Join(re.Violations, "\n"))
				}
			}
		})
	}
}

func TestDecodeStandaloneACME(t *testing.T) {
	data := `{"revision":3,"routes":[{"hostname":"a.test","targets":[{"leaseId":"l","address":"127.0.0.1","port":8080}],` +
		`"tls":{"acme":true,"redirectHttp":true}}],"certificates":[]}`
	tab, err := Decode([]byte(data), ModeStandalone)
	if err != nil {
		t.Fatal(err)
	}
	if !tab.Routes[0].TLS.ACME || !tab.Routes[0].TLS.RedirectHTTP {
		t.Fatalf("tls = %+v", tab.Routes[0].TLS)
	}
	if _, err := Validate(tab, ModeStandalone); err != nil {
		t.Fatal(err)
	}
	// The same table built in Go is refused by a relay-mode validation.
	if _, err := Validate(tab, ModeRelay); err == nil || !strings.Contains(err.Error(), "routes[0].tls.acme is only allowed in standalone mode") {
		t.Fatalf("relay mode: %v", err)
	}
	// Re-encoding keeps the acme shape exactly.
	out, err := json.Marshal(tab)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"tls":{"acme":true,"redirectHttp":true}`) {
		t.Fatalf("encoded %s", out)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for name, data := range exampleTables(t) {
		t.Run(name, func(t *testing.T) {
			tab, err := Decode(data, ModeRelay)
			if err != nil {
				t.Fatal(err)
			}
			out, err := json.Marshal(tab)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Decode(out, ModeRelay)
			if err != nil {
				t.Fatalf("re-encoded table does not decode: %v\n%s", err, out)
			}
			out2, _ := json.Marshal(back)
			if string(out) != string(out2) {
				t.Fatal("encoding is not stable")
			}
			var a, b any
			json.Unmarshal(data, &a)
			json.Unmarshal(out, &b)
			if ja, jb := mustJSON(a), mustJSON(b); ja != jb {
				t.Fatalf("re-encoding changed the table:\n%s\n%s", ja, jb)
			}
		})
	}
	empty, err := json.Marshal(&Table{Revision: 1})
	if err != nil || string(empty) != `{"revision":1,"routes":[],"certificates":[]}` {
		t.Fatalf("empty table encodes as %s (%v)", empty, err)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestDecodeRefusesRepeatedKeys(t *testing.T) {
	_, err := Decode([]byte(`{"revision":1,"revision":2,"routes":[],"certificates":[]}`), ModeRelay)
	wantViolation(t, err, "revision is repeated")
	// Deep down, and spelled with an escape: still the same name, named by its path.
	_, err = Decode([]byte(`{"revision":1,"routes":[{"hostname":"a.test","targets":[{"leaseId":"l","address":"127.0.0.1",`+
		`"port":80,"\u0070ort":81}],"tls":null}],"certificates":[]}`), ModeRelay)
	wantViolation(t, err, "routes[0].targets[0].port is repeated")
}

// TestDecodeAgreesWithEncodingJSON feeds the one-pass reader escapes, whitespace and
// nesting that a plain scan could get wrong, and compares with encoding/json.
func TestDecodeAgreesWithEncodingJSON(t *testing.T) {
	doc := " \n{ \"revision\" : 12 ,\r\n\t\"routes\":[ {\"host\\u006eame\":\"a\\u002etest\", \"targets\" : [ " +
		`{"leaseId":"x\\\"y]}","address":"127.0.0.1","port":80}, {"leaseId":"\\\\","address":"127.0.0.1","port":81} ],` +
		`"tls":{"certificateId":"c\/d","redirectHttp":false}} ] , "certificates" : [{"id":"é","certificatePem":"{[\"]}",` +
		`"privateKeyPem":"\ud83d\ude00"}] } `
	got, err := Decode([]byte(doc), ModeRelay)
	if err != nil {
		t.Fatal(err)
	}
	var want Table
	if err := json.Unmarshal([]byte(doc), &want); err != nil {
		t.Fatal(err)
	}
	if a, b := mustJSON(got), mustJSON(&want); a != b {
		t.Fatalf("\n%s\n%s", a, b)
	}
	if got.Routes[0].Hostname != "a.test" || got.Routes[0].Targets[1].LeaseID != `\\` || got.Routes[0].Targets[0].Port != 80 {
		t.Fatalf("%+v", got.Routes[0])
	}
	// Integral numbers in other forms are integers, as they are to a JavaScript peer.
	alt := strings.Replace(strings.Replace(doc, `"port":80}`, `"port":8e1}`, 1), `"port":81}`, `"port":81.0}`, 1)
	if got, err := Decode([]byte(alt), ModeRelay); err != nil || got.Routes[0].Targets[0].Port != 80 || got.Routes[0].Targets[1].Port != 81 {
		t.Fatalf("8e1 and 81.0: %v", err)
	}
}

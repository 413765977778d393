package redact

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"strconv"
	"strings"
	"testing"
)

func TestPrivateKeysTakesOutEveryForm(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	block := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	ec, _ := x509.MarshalECPrivateKey(key)
	ecBlock := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ec}))
	body := base64.StdEncoding.EncodeToString(der)
	jsonBlock, _ := json.Marshal(block)
	for name, in := range map[string]string{
		"PEM":                 "refused: " + block + " retry later",
		"EC PEM":              "refused: " + ecBlock,
		"JSON-escaped":        "refused: " + string(jsonBlock),
		"Go-quoted":           "refused: " + strconv.Quote(block),
		"cut before its end":  "refused: " + block[:len(block)-40],
		"body on one line":    "refused: " + body + " there",
		"URL alphabet":        base64.RawURLEncoding.EncodeToString(der),
		"one line of the PEM": strings.Split(block, "\n")[1],
	} {
		out := PrivateKeys(in)
		for _, l := range append(strings.Split(block, "\n"), body[:48]) {
			if len(l) >= 40 && !strings.HasPrefix(l, "-----") && strings.Contains(out, l) {
				t.Errorf("%s: %q still holds key material", name, out)
			}
		}
		if !strings.Contains(out, Marker) {
			t.Errorf("%s: %q has no marker", name, out)
		}
	}
	for _, keep := range []string{"cluster ingress registration refused", "hostname a-b.example.test is not allowed", strings.Repeat("x", 63)} {
		if got := PrivateKeys(keep); got != keep {
			t.Errorf("PrivateKeys(%q) = %q, want it unchanged", keep, got)
		}
	}
}

func TestChain(t *testing.T) {
	f := Chain(func(s string) string { return strings.ReplaceAll(s, "bearer", Marker) })
	if got := f("bearer " + strings.Repeat("A", 80)); got != Marker+" "+Marker {
		t.Fatalf("Chain: %q", got)
	}
}

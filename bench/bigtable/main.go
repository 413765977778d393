// Command bigtable writes a large, valid route table for the start-time and apply
// benchmarks (bench/README.md, "Start time"): by default 100,000 routes in 1,000 groups,
// each group a wildcard route and exact routes under its own domain, two targets per
// route, and one certificate per group (a fresh ECDSA P-256 leaf covering the group's
// domain and its wildcard), about 28 MB of JSON.
//
// With -shared-cert every certificate entry carries the same PEM pair (one wildcard for
// *.bench.test, as a table often repeats a wildcard) and the hostnames sit directly under
// bench.test; -variant changes the targets' lease ids so that two tables differ in every
// route (an apply that must recompile everything); -target points the targets at two real
// backends (a port and the next) instead of unroutable 127.x addresses; -certs-from reuses the
// certificates of an earlier table, so variants share their certificates and generating
// them (the slow part) happens once.
//
//	go run ./bench/bigtable -out /tmp/big.json
//	go run ./bench/bigtable -target 127.0.0.1:8080 -variant 1 -out /tmp/big1.json
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sort"
	"strconv"

	"github.com/serve-zone/ingress/internal/testcert"
	"github.com/serve-zone/ingress/routetable"
)

// spec says what table to write.
type spec struct {
	routes, certs int
	sharedCert    bool
	redirect      bool
	variant       int
	revision      int64
	target        string // "" or IPv4:port
	pairs         []pair // certificates to reuse (from -certs-from), else generated
}

type pair struct{ cert, key string }

func main() {
	var s spec
	flag.IntVar(&s.routes, "routes", 100_000, "number of routes (at most 100,000, the contract's limit)")
	flag.IntVar(&s.certs, "certs", 1_000, "number of certificate entries, one per group of routes (at least 1)")
	flag.BoolVar(&s.sharedCert, "shared-cert", false, "every certificate entry carries the same wildcard PEM pair (*.bench.test)")
	flag.BoolVar(&s.redirect, "redirect-http", true, "every route redirects plain HTTP to HTTPS (false: plain HTTP is proxied, for a load over HTTP)")
	flag.IntVar(&s.variant, "variant", 0, "changes every target's lease id, so that tables of two variants differ in every route")
	flag.Int64Var(&s.revision, "revision", 1, "the table's revision")
	flag.StringVar(&s.target, "target", "", "IPv4:port: every route's two targets are this port and the next at this address (default: unroutable 127.x.y.z:8080 and :8081)")
	certsFrom := flag.String("certs-from", "", "reuse the certificates of this table (written by bigtable with the same -certs and -shared-cert)")
	out := flag.String("out", "-", "file to write, - for standard output")
	flag.Parse()
	if *certsFrom != "" {
		var err error
		if s.pairs, err = readPairs(*certsFrom); err != nil {
			log.Fatal(err)
		}
	}
	var w io.Writer = os.Stdout
	if *out != "-" {
		f, err := os.OpenFile(*out, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		w = f
	}
	t, err := s.table()
	if err != nil {
		log.Fatal(err)
	}
	if err := json.NewEncoder(w).Encode(t); err != nil {
		log.Fatal(err)
	}
}

// table builds the table s describes.
func (s *spec) table() (*routetable.Table, error) {
	if s.routes < 1 || s.routes > routetable.MaxRoutes || s.certs < 1 || s.certs > s.routes {
		return nil, fmt.Errorf("bigtable: want 1 <= -certs <= -routes <= %d", routetable.MaxRoutes)
	}
	var host string
	var port int
	if s.target != "" {
		h, p, err := net.SplitHostPort(s.target)
		if port, _ = strconv.Atoi(p); err != nil || port < 1 || port > 65534 || !routetable.ValidTargetAddress(h) {
			return nil, fmt.Errorf("bigtable: -target %q must be IPv4:port", s.target)
		}
		host = h
	}
	if err := s.generatePairs(); err != nil {
		return nil, err
	}
	t := &routetable.Table{Revision: s.revision, Routes: make([]routetable.Route, 0, s.routes), Certificates: []routetable.Certificate{}}
	perGroup := (s.routes + s.certs - 1) / s.certs
	for g := 0; g < s.certs; g++ {
		id := fmt.Sprintf("cert-%05d", g)
		p := s.pairs[g%len(s.pairs)]
		t.Certificates = append(t.Certificates, routetable.Certificate{ID: id, CertificatePEM: p.cert, PrivateKeyPEM: p.key})
		rt := &routetable.RouteTLS{CertificateID: id, RedirectHTTP: s.redirect}
		for i := 0; i < perGroup && len(t.Routes) < s.routes; i++ {
			h := fmt.Sprintf("h%05d.d%05d.bench.test", i, g)
			if s.sharedCert {
				h = fmt.Sprintf("h%05d-d%05d.bench.test", i, g)
			} else if i == 0 {
				h = fmt.Sprintf("*.d%05d.bench.test", g)
			}
			a, p1, p2 := fmt.Sprintf("127.%d.%d.%d", g/250%250, g%250, i%250+1), 8080, 8081
			if host != "" {
				a, p1, p2 = host, port, port+1
			}
			v := ""
			if s.variant != 0 {
				v = "v" + strconv.Itoa(s.variant) + "-"
			}
			t.Routes = append(t.Routes, routetable.Route{Hostname: h, TLS: rt, Targets: []routetable.Target{
				{LeaseID: "lease-" + v + h[2:], Address: a, Port: p1},
				{LeaseID: "lease-b-" + v + h[2:], Address: a, Port: p2},
			}})
		}
	}
	sort.Slice(t.Routes, func(i, j int) bool { return t.Routes[i].Hostname < t.Routes[j].Hostname })
	return t, nil
}

// generatePairs makes the certificates unless they were read: one per group, or one
// wildcard for all with sharedCert.
func (s *spec) generatePairs() error {
	want := s.certs
	if s.sharedCert {
		want = 1
	}
	if s.pairs != nil {
		if len(s.pairs) != want {
			return fmt.Errorf("bigtable: -certs-from holds %d distinct certificates, want %d", len(s.pairs), want)
		}
		return nil
	}
	for g := 0; g < want; g++ {
		hosts := []string{fmt.Sprintf("*.d%05d.bench.test", g), fmt.Sprintf("d%05d.bench.test", g)}
		if s.sharedCert {
			hosts = []string{"*.bench.test", "bench.test"}
		}
		c, k, err := testcert.Generate(hosts...)
		if err != nil {
			return err
		}
		s.pairs = append(s.pairs, pair{c, k})
	}
	return nil
}

// readPairs returns the distinct certificate pairs of a table, in order of first use.
func readPairs(file string) ([]pair, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var t routetable.Table
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("bigtable: %s: %w", file, err)
	}
	var out []pair
	seen := map[pair]bool{}
	for _, c := range t.Certificates {
		p := pair{c.CertificatePEM, c.PrivateKeyPEM}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("bigtable: " + file + " holds no certificate")
	}
	return out, nil
}

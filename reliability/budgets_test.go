package reliability

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
)

// TestClientBudgetsEndToEnd: the binary has the per-address budget flags (issue 25) and
// enforces the connection budget: with --max-conns-per-client 2, a third connection
// from 127.0.0.1 is reset at accept while another loopback address is served, and
// /metrics counts it as ingress_refusals_total{kind="connections"}.
func TestClientBudgetsEndToEnd(t *testing.T) {
	help, _ := exec.Command(binary, "-h").CombinedOutput()
	for _, f := range []string{"-max-conns-per-client", "-max-requests-per-client", "-max-tunnels-per-client"} {
		if !strings.Contains(string(help), f) {
			t.Errorf("ingress -h does not list %s", f)
		}
	}
	const host = "budget.rel.test"
	p, _ := standalone(t, binarytest.TableJSON(t, 1, nil, binarytest.Route(host, "", false, echoBackend(t, "budget"))),
		"--max-conns-per-client", "2", "--max-requests-per-client", "8", "--max-tunnels-per-client", "4")

	get := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(waitLimit))
		if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
			return err
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return errors.New(res.Status)
		}
		return nil
	}
	dial := func(from string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: waitLimit}
		return d.Dial("tcp", p.HTTP)
	}
	for i := range 2 {
		c, err := dial("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := get(c); err != nil {
			t.Fatalf("connection %d under the budget: %v", i+1, err)
		}
	}
	if c, err := dial("127.0.0.1"); err == nil {
		defer c.Close()
		if err := get(c); err == nil {
			t.Fatal("the third connection from 127.0.0.1 was served; want it refused at accept")
		}
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the third connection: %v", err)
	}
	other, err := dial("127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := get(other); err != nil {
		t.Fatalf("another address: %v", err)
	}
	testwait.UntilWhy(t, waitLimit, "the refusal counted", func() (bool, string) {
		n := scrape(t, p.Admin).get(`ingress_refusals_total{kind="connections"}`)
		return n == 1, fmt.Sprintf("%v counted", n)
	})
}

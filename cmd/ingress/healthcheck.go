package main

import (
	"fmt"
	"io"
	"net/http"
	"time"
)

// runHealthcheck asks the admin listener's /healthz; the Docker HEALTHCHECK runs it,
// because the runtime image has no curl.
func runHealthcheck(args []string, stdout io.Writer) error {
	addr := "127.0.0.1:9090"
	if len(args) > 0 {
		addr = args[0]
	}
	client := http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: /healthz answered %s", resp.Status)
	}
	fmt.Fprintln(stdout, "ok")
	return nil
}

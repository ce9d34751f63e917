package caddytester

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// TestReloadAnswersAtOnce reloads a config on the same port again and
// again: the first request on a new connection after each Load must be
// answered by the new config, never dropped by the old one's server.
func TestReloadAnswersAtOnce(t *testing.T) {
	const admin, port = 2990, 9390
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 40 {
		Load(t, admin, fmt.Sprintf(`{
	admin localhost:%d
	grace_period 1ms
}
:%d {
	respond "config %d"
}
`, admin, port, i))
		res, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err != nil {
			t.Fatalf("load %d: the first request: %v", i, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if want := fmt.Sprintf("config %d", i); string(body) != want {
			t.Fatalf("load %d: answered %q, want %q", i, body, want)
		}
	}
}

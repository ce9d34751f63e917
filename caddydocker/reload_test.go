package caddydocker

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCarryDiscoveredRoutes(t *testing.T) {
	own := `{"handle":[{"handler":"static_response","body":"site"}],"terminal":true}`
	config := func(docker string) []byte {
		return []byte(`{"admin":{"listen":"localhost:2019"},"apps":{` + docker + `"http":{"servers":{"gateway":{"listen":[":8080"],"routes":[` + own + `]}}}}}`)
	}
	svc := `{"@id":"docker:gateway:orders:api","match":[{"path":["/orders","/orders/*"]}],"handle":[{"handler":"reverse_proxy","upstreams":[{"dial":"127.0.0.1:9"}]}],"terminal":true}`
	running := []json.RawMessage{
		json.RawMessage(svc),
		json.RawMessage(`{"handle":[{"handler":"static_response","body":"old site"}]}`),
		NoRouteRoute("gateway"),
	}
	live := func(server string) ([]json.RawMessage, error) {
		if server != "gateway" {
			t.Fatalf("asked for server %q", server)
		}
		return running, nil
	}

	t.Run("carried in front, site routes of the new config, no_route last", func(t *testing.T) {
		out, server, n, err := CarryDiscoveredRoutes(config(`"docker":{"server":"gateway"},`), live)
		if err != nil || server != "gateway" || n != 1 {
			t.Fatalf("server %q n %d err %v", server, n, err)
		}
		var cfg struct {
			Admin json.RawMessage `json:"admin"`
			Apps  struct {
				HTTP struct {
					Servers map[string]struct {
						Listen []string          `json:"listen"`
						Routes []json.RawMessage `json:"routes"`
					} `json:"servers"`
				} `json:"http"`
			} `json:"apps"`
		}
		if err := json.Unmarshal(out, &cfg); err != nil {
			t.Fatal(err)
		}
		got := cfg.Apps.HTTP.Servers["gateway"].Routes
		want := MergeRoutes("gateway", []json.RawMessage{json.RawMessage(own)}, []json.RawMessage{json.RawMessage(svc)})
		if !SameRoutes(got, want) {
			t.Fatalf("routes\n got %s\nwant %s", got, want)
		}
		if strings.Contains(string(out), "old site") {
			t.Fatal("the running config's own routes were carried over")
		}
		if string(cfg.Admin) != `{"listen":"localhost:2019"}` || cfg.Apps.HTTP.Servers["gateway"].Listen[0] != ":8080" {
			t.Fatalf("the rest of the config changed: %s", out)
		}
		// what the app's next apply computes from the result: no change
		if !SameRoutes(MergeRoutes("gateway", got, []json.RawMessage{json.RawMessage(svc)}), got) {
			t.Fatal("the docker app would re-apply after this reload")
		}
	})

	t.Run("only server is the default", func(t *testing.T) {
		_, server, n, err := CarryDiscoveredRoutes(config(`"docker":{},`), live)
		if err != nil || server != "gateway" || n != 1 {
			t.Fatalf("server %q n %d err %v", server, n, err)
		}
	})

	t.Run("no docker app: unchanged", func(t *testing.T) {
		in := config("")
		out, server, _, err := CarryDiscoveredRoutes(in, func(string) ([]json.RawMessage, error) {
			t.Fatal("asked the running config")
			return nil, nil
		})
		if err != nil || server != "" || string(out) != string(in) {
			t.Fatalf("server %q err %v out %s", server, err, out)
		}
	})

	t.Run("nothing discovered yet: unchanged", func(t *testing.T) {
		in := config(`"docker":{"server":"gateway"},`)
		out, _, n, err := CarryDiscoveredRoutes(in, func(string) ([]json.RawMessage, error) { return nil, nil })
		if err != nil || n != 0 || string(out) != string(in) {
			t.Fatalf("n %d err %v out %s", n, err, out)
		}
	})

	for _, tc := range []struct{ name, config, wantErr string }{
		{"not JSON", `Caddyfile text`, "not a JSON object"},
		{"unknown server", `{"apps":{"docker":{"server":"nope"},"http":{"servers":{"gateway":{}}}}}`, `server "nope" is not an HTTP server`},
		{"two servers, none named", `{"apps":{"docker":{},"http":{"servers":{"a":{},"b":{}}}}}`, "set server to one of the HTTP servers [a b]"},
		{"no http app", `{"apps":{"docker":{}}}`, "without an http app"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := CarryDiscoveredRoutes([]byte(tc.config), live)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
	t.Run("running config unreadable", func(t *testing.T) {
		boom := errors.New("boom")
		_, _, _, err := CarryDiscoveredRoutes(config(`"docker":{"server":"gateway"},`), func(string) ([]json.RawMessage, error) { return nil, boom })
		if !errors.Is(err, boom) {
			t.Fatalf("err %v", err)
		}
	})
}

package dashboard

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFollowsConfigAdmin: the gateway_dashboard handler reads the routes
// through the admin API at the config's own `admin` address (here a unix
// socket), without an admin option of its own; with `admin off` the page
// still works and says why the routes are missing.
func TestFollowsConfigAdmin(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	config := func(admin string) string {
		return fmt.Sprintf(`{
	admin %s
	auto_https off
	http_port 19803
	https_port 19898
}

http://127.0.0.1:19804 {
	handle /ops/* {
		gateway_dashboard {
			path /ops
		}
	}
	handle /only-in-this-config {
		respond "here"
	}
}
`, admin)
	}
	overview := func(t *testing.T) Overview {
		t.Helper()
		resp, err := http.Get("http://127.0.0.1:19804/ops/api/overview")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var o Overview
		if resp.StatusCode != 200 || json.Unmarshal(b, &o) != nil {
			t.Fatalf("overview: %d %s", resp.StatusCode, b)
		}
		return o
	}
	t.Run("admin on a unix socket", func(t *testing.T) {
		startGateway(t, config("unix/"+sock))
		deadline := time.Now().Add(10 * time.Second)
		for {
			o := overview(t)
			found := false
			for _, r := range o.Routes {
				found = found || strings.Contains(fmt.Sprint(r.Match), "/only-in-this-config")
			}
			if o.RoutesError == "" && found {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("routes of this config not shown: error %q, routes %+v", o.RoutesError, o.Routes)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("admin off", func(t *testing.T) {
		startGateway(t, config("off"))
		o := overview(t)
		const want = "the dashboard reads routes through the admin API, but this config turns the admin API off"
		if !strings.HasPrefix(o.RoutesError, want) || len(o.Routes) != 0 {
			t.Fatalf("routes error %q (want %q...), routes %+v", o.RoutesError, want, o.Routes)
		}
	})
}

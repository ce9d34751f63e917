package caddydocker

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// vanishedConfig is a gateway whose site has a catch-all of its own, with
// the discovered routes in it (docker_routes in the catch-all handle).
func vanishedConfig(p *podmantest.Podman, stateFile, extra string) string {
	return dockerConfig(p.Host(), stateFile, "debounce 50ms"+extra, ownSite+`
	handle {
		docker_routes
		respond "public"
	}`)
}

// TestVanishedServiceAnswersNoRoute: a service that disappears answers
// 404 no_route, not the site's own catch-all (issue 37, item 5), also
// after a restart of the gateway; with forget_after 0 its path falls
// through to the site's routes at once.
func TestVanishedServiceAnswersNoRoute(t *testing.T) {
	p := getPodman(t)
	t.Cleanup(p.RemoveAll)
	stateFile := filepath.Join(t.TempDir(), "routes.json")
	startGateway(t, vanishedConfig(p, stateFile, ""))
	t.Cleanup(func() { stopGateway(t) })
	noRoute := answerBody("no_route", "/gone/x")

	pn := freeport.Port(t)
	if err := p.Run("gone", pn, labels("gone", pn, "/gone")); err != nil {
		t.Fatal(err)
	}
	podmantest.Eventually(t, "routed", 20*time.Second, expect("/gone/x", 200, "gone /gone/x"))
	podmantest.Eventually(t, "the site's catch-all", 5*time.Second, expect("/elsewhere", 200, "public"))
	if err := p.Remove("gone"); err != nil {
		t.Fatal(err)
	}
	podmantest.Eventually(t, "the vanished service's 404", 20*time.Second, expect("/gone/x", 404, noRoute))
	podmantest.Eventually(t, "the site's catch-all still", 5*time.Second, expect("/elsewhere", 200, "public"))
	if s := snapshot(t); len(s.Vanished) != 2 { // its two routers
		t.Errorf("snapshot: %d vanished routes, want 2: %+v", len(s.Vanished), s.Vanished)
	}

	// a restart keeps it (the state file), from the first request; the
	// state file is written just after the reload that answers the 404,
	// so the test waits for it before stopping the gateway
	podmantest.Eventually(t, "the vanished routes in the state file", 10*time.Second, func() string {
		st, err := ReadState(stateFile)
		if err != nil || len(st.Vanished) != 2 {
			return fmt.Sprintf("%d vanished routes in the state file (%v)", len(st.Vanished), err)
		}
		return ""
	})
	stopGateway(t)
	startGateway(t, vanishedConfig(p, stateFile, ""))
	if status, body, err := get("/gone/x"); err != nil || status != 404 || body != noRoute {
		t.Errorf("right after a restart: %d %q %v, want 404 %s", status, body, err, noRoute)
	}

	// forget_after 0: the site's routes get its path again
	startGateway(t, vanishedConfig(p, stateFile, "\n\t\tforget_after 0"))
	podmantest.Eventually(t, "forgotten", 20*time.Second, expect("/gone/x", 200, "public"))
}

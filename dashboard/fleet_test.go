package dashboard

import (
	"github.com/apigate/gateway/internal/testkit/chromium"

	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/apigate/gateway/caddydocker"
	"github.com/apigate/gateway/internal/natsconn"
	"github.com/apigate/gateway/internal/testkit/natstest"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// TestFleetNamesakeShown: a gateway whose fleet node name another gateway
// also uses (the default, the host name, on two hosts of one name) shows
// the conflict on its dashboard, in the JSON and on the page, naming the
// node and the `node` option. The gateway runs in process against a real
// Podman and a real NATS server; the other gateway is a second fleet
// member on its own NATS connection.
func TestFleetNamesakeShown(t *testing.T) {
	if os.Getenv("CI") != "" {
		chromium.Path(t)
	}
	p := getPodman(t)
	nats := natstest.StartCluster(t, 1)
	const node = "gw-shared-name"
	startGateway(t, fmt.Sprintf(`{
	admin %s
	auto_https off
	http_port 19800
	https_port 19899
	servers :19801 {
		name gateway
	}
	docker {
		host %s
		state_file %s
		server gateway
		fleet {
			nats %s
			node %s
			advertise 127.0.0.1
			ttl 1s
		}
	}
}

:19801 {
	respond "own"
}

:19802 {
	bind 127.0.0.1
	gateway_dashboard
}
`, adminAddr, p.Host(), filepath.Join(t.TempDir(), "routes.json"), nats.URL(), node))

	conn, release, err := natsconn.Get(natsconn.Options{Servers: nats.URLs, Name: "the-other-gateway"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	other, err := caddydocker.NewFleet(caddydocker.FleetConfig{Node: node, Advertise: "127.0.0.2", TTL: time.Second}, conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	other.Start()
	t.Cleanup(other.Stop)
	other.Publish([]caddydocker.Container{})

	podmantest.Eventually(t, "the namesake in the dashboard's JSON", 20*time.Second, func() string {
		f := overview(t).Containers.Fleet
		if f == nil {
			return "no fleet in the overview"
		}
		if f.Node != node || len(f.Namesakes) != 1 || f.Namesakes[0].Advertise != "127.0.0.2" {
			return fmt.Sprintf("fleet node %q, namesakes %+v", f.Node, f.Namesakes)
		}
		return ""
	})

	b := newBrowser(t)
	b.run(t, 30*time.Second, chromedp.Navigate("http://"+pageAddr+"/"), chromedp.WaitVisible(chromedp.CSS("#containers")))
	b.waitJS(t, "the conflict on the page", 15*time.Second, `(() => {
		const e = document.getElementById("fleet-conflict");
		if (!e || e.hidden || !e.innerText.includes("`+node+`")) return "conflict element: " + (e ? (e.hidden ? "hidden" : e.innerText) : "missing");
		return "";
	})()`)
	text := b.text(t, "#fleet-conflict")
	for _, want := range []string{node, "127.0.0.2", "its own node", "host name"} {
		if !strings.Contains(text, want) {
			t.Errorf("conflict text %q lacks %q", text, want)
		}
	}
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}

	// The other gateway renamed (stopped here): the warning goes away.
	other.Stop()
	b.waitJS(t, "the conflict gone", 15*time.Second, `(() => {
		const e = document.getElementById("fleet-conflict");
		return e.hidden ? "" : "still shown: " + e.innerText;
	})()`)
}

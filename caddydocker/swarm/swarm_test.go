package swarm

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	dockerswarm "github.com/docker/docker/api/types/swarm"

	"github.com/apigate/gateway/caddydocker"
)

// The fixtures in testdata follow the Docker API's answers to
// GET /services (docker service inspect) and GET /tasks, written by hand:
// no Swarm runs here. Networks: ingress (7pu6...), proxy (k9vq..., the
// gateway's), shop_backend (3ytw...). Services: shop_orders (3 replicas,
// VIPs on all three networks, ingress port 18080->8080, plus a shut down, a
// failed and a still running but stopping task), shop_search (dnsrr, 3
// replicas, one pending), shop_legacy (gateway labels on the container
// spec only), monitor_agent (global, host mode ports 9100/tcp and 8125/udp,
// one task preparing), shop_db (no gateway labels), shop_reports (0
// replicas).

// routeOptions and labelOptions are those of a docker app with jwt_auth
// and permission configured, so every label the fixtures carry is valid.
var (
	routeOptions = caddydocker.BuildOptions{
		Server:           "gateway",
		StreamCloseDelay: caddydocker.DefaultStreamCloseDelay,
		JWTAuth:          json.RawMessage(`{"handler":"jwt_auth","hmac_secret":"{env.JWT_SECRET}"}`),
		Permission:       json.RawMessage(`{"handler":"permission","url":"http://127.0.0.1:9100/check"}`),
	}
	labelOptions = caddydocker.LabelOptions{HaveJWT: true, HavePermission: true}
)

func loadSwarm(t testing.TB, services, tasks string) ([]dockerswarm.Service, []dockerswarm.Task) {
	t.Helper()
	var ss []dockerswarm.Service
	var ts []dockerswarm.Task
	for _, f := range []struct {
		name string
		v    any
	}{{services, &ss}, {tasks, &ts}} {
		b, err := os.ReadFile(filepath.Join("testdata", f.name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, f.v); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
	}
	return ss, ts
}

// summary is one Container as "<name> <id> <ip> <ports>".
func summary(cs []caddydocker.Container) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s %s %s %v", c.Name, c.ID, c.IP, c.Ports))
	}
	return out
}

// issueSummary is one Issue as "<service> <task> skipped|notice: <reason>".
func issueSummary(is []Issue) []string {
	out := []string{}
	for _, i := range is {
		kind := "notice"
		if i.Skipped {
			kind = "skipped"
		}
		out = append(out, fmt.Sprintf("%s %s %s: %s", i.Service, i.Task, kind, i.Reason))
	}
	return out
}

// swarmDials feeds containers through caddydocker.Discover and caddydocker.BuildRoutes and returns
// each route's upstream dial addresses by route ID.
func swarmDials(t *testing.T, cs []caddydocker.Container) map[string][]string {
	t.Helper()
	ds := caddydocker.Discover(cs, labelOptions)
	for _, d := range ds {
		if d.Errors != nil {
			t.Errorf("container %s: label errors %v", d.Container.Name, d.Errors)
		}
	}
	plan, err := caddydocker.BuildRoutes(ds, routeOptions)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Warnings) > 0 {
		t.Errorf("warnings: %q", plan.Warnings)
	}
	// route ID -> the replicas its service's pool holds
	out := map[string][]string{}
	for _, raw := range plan.Routes {
		var r struct {
			ID     string `json:"@id"`
			Handle []struct {
				Handler string `json:"handler"`
				Source  struct {
					Service string `json:"service"`
				} `json:"dynamic_upstreams"`
			} `json:"handle"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		for _, h := range r.Handle {
			if h.Handler == "reverse_proxy" {
				out[r.ID] = append([]string{}, plan.Pools[h.Source.Service]...)
			}
		}
	}
	return out
}

const (
	proxyID   = "k9vq0xgl2y3h8dzb5c1tmw4ra"
	backendID = "3ytw9jx6bq0n2lmc8rv5ep7sd"
)

type swarmCase struct {
	name       string
	mode       Endpoint
	network    string
	containers []string
	issues     []string
	dials      map[string][]string
}

var (
	legacySkipped  = "shop_legacy  skipped: gateway.* labels are on the container spec (compose labels:), which Swarm mode does not read; put them on the service (compose deploy.labels:, docker service create --label)"
	reportsSkipped = "shop_reports  skipped: no running task"
	searchDNSRR    = "shop_search  notice: endpoint mode dnsrr has no virtual IP: routed to its running tasks"

	vipOnProxy = swarmCase{
		containers: []string{
			"monitor_agent b1n4m7q0s3u6w9y2a5c8e1g4i 10.0.2.40 [{9100 9100}]",
			"shop_orders x2kq8g9v6m3n0p1r4s5t7u8w9 10.0.2.9 [{8080 18080}]",
			"shop_search.1.q5w8e1r4t7y0u3i6o9p2a5s8d q5w8e1r4t7y0u3i6o9p2a5s8d 10.0.2.21 []",
			"shop_search.2.f1g4h7j0k3l6z9x2c5v8b1n4m f1g4h7j0k3l6z9x2c5v8b1n4m 10.0.2.22 []",
		},
		issues: []string{legacySkipped, reportsSkipped, searchDNSRR},
		dials: map[string][]string{
			"docker:gateway:metrics:scrape":     {"10.0.2.40:9100"},
			"docker:gateway:orders:api":         {"10.0.2.9:8080"},
			"docker:gateway:shop_search:search": {"10.0.2.21:9200", "10.0.2.22:9200"},
		},
	}
	vipOnBackend = swarmCase{
		containers: []string{"shop_orders x2kq8g9v6m3n0p1r4s5t7u8w9 10.0.1.5 [{8080 18080}]"},
		issues: []string{
			`monitor_agent  skipped: no virtual IP on network "shop_backend" (on: proxy); attach the service to the gateway's network or set gateway.address`,
			legacySkipped, reportsSkipped, searchDNSRR,
			`shop_search q5w8e1r4t7y0u3i6o9p2a5s8d skipped: no task address on network "shop_backend" (on: proxy); attach the service to the gateway's network or set gateway.address`,
			`shop_search f1g4h7j0k3l6z9x2c5v8b1n4m skipped: no task address on network "shop_backend" (on: proxy); attach the service to the gateway's network or set gateway.address`,
		},
		dials: map[string][]string{"docker:gateway:orders:api": {"10.0.1.5:8080"}},
	}
	tasksOnProxy = swarmCase{
		containers: []string{
			"monitor_agent.lm5e8w1o9zq2vjx0c3h7tnb4k.n6m9b2v5c8x1z4l7k0j3h6g9f n6m9b2v5c8x1z4l7k0j3h6g9f 10.0.2.41 [{9100 9100}]",
			"monitor_agent.r8c2n5v0q4k7x1m9w3e6t2y5u.y1t4r7e0w3q6a9s2d5f8g1h4j y1t4r7e0w3q6a9s2d5f8g1h4j 10.0.2.42 [{9100 9100}]",
			"shop_orders.1.9f3kx2m8q1w7e4r6t0y5u3i2o 9f3kx2m8q1w7e4r6t0y5u3i2o 10.0.2.11 [{8080 18080}]",
			"shop_orders.2.c6v1b8n3m0q5w2e7r4t9y6u1i c6v1b8n3m0q5w2e7r4t9y6u1i 10.0.2.12 [{8080 18080}]",
			"shop_orders.3.j2h5g8f1d4s7a0p3o6i9u2y5t j2h5g8f1d4s7a0p3o6i9u2y5t 10.0.2.13 [{8080 18080}]",
			"shop_search.1.q5w8e1r4t7y0u3i6o9p2a5s8d q5w8e1r4t7y0u3i6o9p2a5s8d 10.0.2.21 []",
			"shop_search.2.f1g4h7j0k3l6z9x2c5v8b1n4m f1g4h7j0k3l6z9x2c5v8b1n4m 10.0.2.22 []",
		},
		issues: []string{legacySkipped, reportsSkipped},
		dials: map[string][]string{
			"docker:gateway:metrics:scrape":     {"10.0.2.41:9100", "10.0.2.42:9100"},
			"docker:gateway:orders:api":         {"10.0.2.11:8080", "10.0.2.12:8080", "10.0.2.13:8080"},
			"docker:gateway:shop_search:search": {"10.0.2.21:9200", "10.0.2.22:9200"},
		},
	}
	tasksOnBackend = swarmCase{
		containers: []string{
			"shop_orders.1.9f3kx2m8q1w7e4r6t0y5u3i2o 9f3kx2m8q1w7e4r6t0y5u3i2o 10.0.1.7 [{8080 18080}]",
			"shop_orders.2.c6v1b8n3m0q5w2e7r4t9y6u1i c6v1b8n3m0q5w2e7r4t9y6u1i 10.0.1.8 [{8080 18080}]",
			"shop_orders.3.j2h5g8f1d4s7a0p3o6i9u2y5t j2h5g8f1d4s7a0p3o6i9u2y5t 10.0.1.9 [{8080 18080}]",
		},
		issues: []string{
			`monitor_agent n6m9b2v5c8x1z4l7k0j3h6g9f skipped: no task address on network "shop_backend" (on: proxy); attach the service to the gateway's network or set gateway.address`,
			`monitor_agent y1t4r7e0w3q6a9s2d5f8g1h4j skipped: no task address on network "shop_backend" (on: proxy); attach the service to the gateway's network or set gateway.address`,
			legacySkipped, reportsSkipped,
			`shop_search q5w8e1r4t7y0u3i6o9p2a5s8d skipped: no task address on network "shop_backend" (on: proxy); attach the service to the gateway's network or set gateway.address`,
			`shop_search f1g4h7j0k3l6z9x2c5v8b1n4m skipped: no task address on network "shop_backend" (on: proxy); attach the service to the gateway's network or set gateway.address`,
		},
		dials: map[string][]string{"docker:gateway:orders:api": {"10.0.1.7:8080", "10.0.1.8:8080", "10.0.1.9:8080"}},
	}
)

func swarmWith(c swarmCase, name string, mode Endpoint, network string) swarmCase {
	c.name, c.mode, c.network = name, mode, network
	return c
}

// byID is c with the network given as id, which issues then quote.
func byID(c swarmCase, name string, mode Endpoint, netName, id string) swarmCase {
	c = swarmWith(c, name, mode, id)
	c.issues = append([]string(nil), c.issues...)
	for i := range c.issues {
		c.issues[i] = strings.ReplaceAll(c.issues[i], fmt.Sprintf("network %q", netName), fmt.Sprintf("network %q", id))
	}
	return c
}

// TestSwarmContainers maps the fixture in both endpoint modes on either
// network, by name and by ID; with no network, proxy is chosen (first by
// name once ingress is left out), so it equals network "proxy".
func TestSwarmContainers(t *testing.T) {
	services, tasks := loadSwarm(t, "services.json", "tasks.json")
	for _, tc := range []swarmCase{
		swarmWith(vipOnProxy, "vip_default_network", VIP, ""), // ingress sorts first but is left out
		swarmWith(vipOnProxy, "vip_proxy_by_name", VIP, "proxy"),
		swarmWith(vipOnProxy, "vip_proxy_by_id", VIP, proxyID),
		swarmWith(vipOnBackend, "vip_backend_by_name", VIP, "shop_backend"),
		byID(vipOnBackend, "vip_backend_by_id", VIP, "shop_backend", backendID),
		swarmWith(tasksOnProxy, "tasks_default_network", Tasks, ""),
		swarmWith(tasksOnProxy, "tasks_proxy_by_name", Tasks, "proxy"),
		swarmWith(tasksOnBackend, "tasks_backend_by_name", Tasks, "shop_backend"),
		byID(tasksOnBackend, "tasks_backend_by_id", Tasks, "shop_backend", backendID),
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, issues := Containers(services, tasks, tc.mode, tc.network)
			if got := summary(cs); !reflect.DeepEqual(got, tc.containers) {
				t.Errorf("containers:\n got %q\nwant %q", got, tc.containers)
			}
			if got := issueSummary(issues); !reflect.DeepEqual(got, tc.issues) {
				t.Errorf("issues:\n got %q\nwant %q", got, tc.issues)
			}
			if got := swarmDials(t, cs); !reflect.DeepEqual(got, tc.dials) {
				t.Errorf("dials:\n got %v\nwant %v", got, tc.dials)
			}
			for _, c := range cs {
				if c.Health != "" || c.HostNetwork || c.Node != "" || c.Advertise != "" {
					t.Errorf("%s: unexpected %+v", c.Name, c)
				}
			}
		})
	}
}

// TestSwarmTaskStates: only tasks that run and are meant to run become
// upstreams; shut down, failed, pending, preparing and stopping ones do not.
func TestSwarmTaskStates(t *testing.T) {
	services, tasks := loadSwarm(t, "services.json", "tasks.json")
	cs, _ := Containers(services, tasks, Tasks, "")
	got := map[string]bool{}
	for _, c := range cs {
		got[c.ID] = true
	}
	for _, tk := range tasks {
		want := tk.Status.State == dockerswarm.TaskStateRunning && tk.DesiredState == dockerswarm.TaskStateRunning &&
			tk.ServiceID != "d5f8h1j4l7n0p3r6t9v2x5z8b" && tk.ServiceID != "h3j6k9m2p5r8t1w4y7a0c3e6g" // not opted in
		if got[tk.ID] != want {
			t.Errorf("task %s (%s, desired %s): routed %v, want %v", tk.ID, tk.Status.State, tk.DesiredState, got[tk.ID], want)
		}
	}
	for _, id := range []string{"e8r1t4y7u0i3o6p9a2s5d8f1g", "m4n7b0v3c6x9z2l5k8j1h4g7f", "t7y0u3i6o9p2a5s8d1f4g7h0j", "u9i2o5p8a1s4d7f0g3h6j9k2l", "k8j5h2g9f6d3s0a7p4o1i8u5y"} {
		if got[id] {
			t.Errorf("task %s is routed", id)
		}
	}
}

// TestSwarmLabels: labels are the service's; in tasks mode gateway.name
// defaults to the service name; the input is not modified.
func TestSwarmLabels(t *testing.T) {
	services, tasks := loadSwarm(t, "services.json", "tasks.json")
	var search dockerswarm.Service
	for _, s := range services {
		if s.Spec.Name == "shop_search" {
			search = s
		}
	}
	before := maps.Clone(search.Spec.Labels)

	vip, _ := Containers(services, tasks, VIP, "")
	if !reflect.DeepEqual(vip[1].Labels, services[0].Spec.Labels) {
		t.Errorf("vip labels %v, want the service's %v", vip[1].Labels, services[0].Spec.Labels)
	}
	cs, _ := Containers(services, tasks, Tasks, "")
	for _, c := range cs {
		if !strings.HasPrefix(c.Name, "shop_search.") {
			continue
		}
		want := maps.Clone(before)
		want["gateway.name"] = "shop_search"
		if !reflect.DeepEqual(c.Labels, want) {
			t.Errorf("%s labels %v, want %v", c.Name, c.Labels, want)
		}
	}
	if !reflect.DeepEqual(search.Spec.Labels, before) {
		t.Errorf("service labels modified: %v", search.Spec.Labels)
	}
}

// TestSwarmContainerSpecLabels: labels only on the container spec skip the
// service with an issue that says to move them; on both, the service's
// win and the container spec's differing ones are named in a notice.
func TestSwarmContainerSpecLabels(t *testing.T) {
	services, tasks := loadSwarm(t, "services.json", "tasks.json")
	orders := services[0]
	if orders.Spec.Name != "shop_orders" {
		t.Fatal("fixture order changed")
	}
	orders.Spec.TaskTemplate.ContainerSpec.Labels = map[string]string{
		"com.docker.stack.namespace":   "shop",
		"gateway.enable":               "true", // same as the service's: not reported
		"gateway.port":                 "9999", // differs
		"gateway.router.x.path_prefix": "/x",   // absent from the service
	}
	cs, issues := Containers([]dockerswarm.Service{orders, services[2]}, tasks, VIP, "")
	want := []string{
		legacySkipped,
		"shop_orders  notice: container spec labels gateway.port, gateway.router.x.path_prefix are ignored: only the service's labels (compose deploy.labels:) are read",
	}
	if got := issueSummary(issues); !reflect.DeepEqual(got, want) {
		t.Errorf("issues:\n got %q\nwant %q", got, want)
	}
	if got := swarmDials(t, cs); !reflect.DeepEqual(got, map[string][]string{"docker:gateway:orders:api": {"10.0.2.9:8080"}}) {
		t.Errorf("dials %v", got)
	}
	for _, i := range issues {
		if !strings.Contains(i.Error(), "swarm service "+i.Service+" ("+i.ServiceID+")") {
			t.Errorf("error %q does not name the service", i.Error())
		}
	}
}

// TestSwarmTaskName follows swarmkit's naming.Task.
func TestSwarmTaskName(t *testing.T) {
	for _, tc := range []struct {
		name string
		task dockerswarm.Task
		want string
	}{
		{"replicated", dockerswarm.Task{ID: "tid", Slot: 2, NodeID: "nid"}, "web.2.tid"},
		{"global", dockerswarm.Task{ID: "tid", NodeID: "nid"}, "web.nid.tid"},
		{"annotated", dockerswarm.Task{ID: "tid", Slot: 2, Annotations: dockerswarm.Annotations{Name: "custom"}}, "custom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := taskName("web", &tc.task); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSwarmPorts: TCP only, target and published both set; a host mode
// port the task reports (a dynamic published port) wins.
func TestSwarmPorts(t *testing.T) {
	s := dockerswarm.Service{Endpoint: dockerswarm.Endpoint{Ports: []dockerswarm.PortConfig{
		{Protocol: "tcp", TargetPort: 80, PublishedPort: 0, PublishMode: "host"},
		{Protocol: "tcp", TargetPort: 443, PublishedPort: 8443, PublishMode: "ingress"},
		{Protocol: "udp", TargetPort: 53, PublishedPort: 53, PublishMode: "ingress"},
		{Protocol: "sctp", TargetPort: 99, PublishedPort: 99},
		{TargetPort: 22, PublishedPort: 2222}, // no protocol means tcp
	}}}
	task := dockerswarm.Task{Status: dockerswarm.TaskStatus{PortStatus: dockerswarm.PortStatus{Ports: []dockerswarm.PortConfig{
		{Protocol: "tcp", TargetPort: 80, PublishedPort: 30001, PublishMode: "host"},
	}}}}
	for _, tc := range []struct {
		name string
		task *dockerswarm.Task
		want []caddydocker.Port
	}{
		{"service", nil, []caddydocker.Port{{Private: 22, Public: 2222}, {Private: 443, Public: 8443}}},
		{"task", &task, []caddydocker.Port{{Private: 22, Public: 2222}, {Private: 80, Public: 30001}, {Private: 443, Public: 8443}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ports(&s, tc.task); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSwarmStripMask(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.1.5/24":   "10.0.1.5",
		"10.0.1.5":      "10.0.1.5",
		"fd00::5/64":    "fd00::5",
		" 10.0.1.5/24 ": "10.0.1.5",
		"10.0.1.300/24": "",
		"garbage":       "",
		"":              "",
	} {
		if got := stripMask(in); got != want {
			t.Errorf("stripMask(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSwarmUnknownMode(t *testing.T) {
	services, tasks := loadSwarm(t, "services.json", "tasks.json")
	cs, issues := Containers(services, tasks, "dnsrr", "")
	if len(cs) != 0 || len(issues) != 1 || !strings.Contains(issues[0].Error(), `unknown endpoint mode "dnsrr"`) {
		t.Errorf("got %v, %v", cs, issues)
	}
}

// TestSwarmMalformed: missing and broken fields (no ID, no name, null
// labels and specs, bad CIDRs, tasks without state or attachments, ports
// out of range, a service listed twice) never panic, and every issue
// names its service.
func TestSwarmMalformed(t *testing.T) {
	services, tasks := loadSwarm(t, "malformed_services.json", "malformed_tasks.json")
	for _, mode := range []Endpoint{VIP, Tasks} {
		for _, network := range []string{"", "n1000000000000000000000001", "n1name", "nope"} {
			t.Run(fmt.Sprintf("%s_%s", mode, network), func(t *testing.T) {
				cs, issues := Containers(services, tasks, mode, network)
				for _, i := range issues {
					if i.Service == "" && i.ServiceID == "" {
						t.Errorf("issue names no service: %v", i)
					}
				}
				if _, err := caddydocker.BuildRoutes(caddydocker.Discover(cs, labelOptions), routeOptions); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
	const attach = "; attach the service to the gateway's network or set gateway.address"
	for _, tc := range []struct {
		mode       Endpoint
		network    string
		containers []string
		issues     []string
	}{
		{VIP, "", []string{"ports r5ports00000000000000000e 10.9.0.2 []"}, []string{
			"r1noname0000000000000000a  skipped: no virtual IP on a network other than ingress (on: no network)" + attach,
			"badvip  notice: container spec labels gateway.port are ignored: only the service's labels (compose deploy.labels:) are read",
			"badvip  skipped: no virtual IP on a network other than ingress (on: ? without a valid address, n1name without a valid address)" + attach,
			"ctronly  skipped: gateway.* labels are on the container spec (compose labels:), which Swarm mode does not read; put them on the service (compose deploy.labels:, docker service create --label)",
			"dnsrr_no_tasks  skipped: no running task",
			"no_id  skipped: service has no ID",
		}},
		{Tasks, "n1name", []string{
			"ports.-1.t3ports00000000000000003 t3ports00000000000000003 10.9.0.7 []",
			"r1noname0000000000000000a..t4bareip00000000000000004 t4bareip00000000000000004 10.9.0.9 []",
		}, []string{
			"badvip  notice: container spec labels gateway.port are ignored: only the service's labels (compose deploy.labels:) are read",
			`badvip t1noattach0000000000000001 skipped: no task address on network "n1name" (on: no network)` + attach,
			`badvip t2badaddr00000000000000002 skipped: no task address on network "n1name" (on: n1name without a valid address)` + attach,
			"ctronly  skipped: gateway.* labels are on the container spec (compose labels:), which Swarm mode does not read; put them on the service (compose deploy.labels:, docker service create --label)",
			"dnsrr_no_tasks  skipped: no running task",
			"no_id  skipped: service has no ID",
			"ports  skipped: a running task has no ID",
		}},
	} {
		t.Run("expect_"+string(tc.mode), func(t *testing.T) {
			cs, issues := Containers(services, tasks, tc.mode, tc.network)
			if got := summary(cs); !reflect.DeepEqual(got, tc.containers) {
				t.Errorf("containers:\n got %q\nwant %q", got, tc.containers)
			}
			if got := issueSummary(issues); !reflect.DeepEqual(got, tc.issues) {
				t.Errorf("issues:\n got %q\nwant %q", got, tc.issues)
			}
		})
	}
	for _, in := range []struct {
		ss []dockerswarm.Service
		ts []dockerswarm.Task
	}{{nil, nil}, {[]dockerswarm.Service{}, nil}, {nil, tasks}, {services, nil}} {
		for _, mode := range []Endpoint{VIP, Tasks} {
			Containers(in.ss, in.ts, mode, "")
		}
	}
}

// FuzzSwarmContainers changes the fields Containers reads (addresses,
// network IDs and names, states, slots, ports, labels) in the fixture: no
// panic, sorted output, upstream IPs that parse, issues that name their
// service, and routes that build.
func FuzzSwarmContainers(f *testing.F) {
	f.Add("10.0.2.99/24", "10.0.2.98/24", proxyID, "proxy", "", "running", 1, uint32(8080), uint32(18080), "tcp", "gateway.name", "")
	f.Add("garbage", "fd00::5/64", "zz", "aaa", "", "running", 0, uint32(70000), uint32(0), "udp", "gateway.port", "x")
	f.Add("", "10.0.1.1", backendID, "shop_backend", backendID, "pending", -1, uint32(0), uint32(1), "", "gateway.enable", "false")
	f.Fuzz(func(t *testing.T, vip, addr, netID, netName, network, state string, slot int, target, published uint32, proto, key, value string) {
		services, tasks := loadSwarm(t, "services.json", "tasks.json")
		s, tk := &services[0], &tasks[0] // shop_orders and its slot 1 task
		s.Endpoint.VirtualIPs = append(s.Endpoint.VirtualIPs, dockerswarm.EndpointVirtualIP{NetworkID: netID, Addr: vip})
		s.Endpoint.Ports = append(s.Endpoint.Ports, dockerswarm.PortConfig{Protocol: dockerswarm.PortConfigProtocol(proto), TargetPort: target, PublishedPort: published})
		s.Spec.Labels[key] = value
		tk.NetworksAttachments = append([]dockerswarm.NetworkAttachment{{
			Network:   dockerswarm.Network{ID: netID, Spec: dockerswarm.NetworkSpec{Annotations: dockerswarm.Annotations{Name: netName}}},
			Addresses: []string{addr},
		}}, tk.NetworksAttachments...)
		tk.Status.State, tk.Slot = dockerswarm.TaskState(state), slot
		for _, mode := range []Endpoint{VIP, Tasks} {
			cs, issues := Containers(services, tasks, mode, network)
			if !sort.SliceIsSorted(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name || cs[i].Name == cs[j].Name && cs[i].ID < cs[j].ID }) {
				t.Fatalf("not sorted: %v", summary(cs))
			}
			for _, c := range cs {
				if c.IP != "" && net.ParseIP(c.IP) == nil {
					t.Fatalf("%s: bad IP %q", c.Name, c.IP)
				}
			}
			for _, i := range issues {
				if i.Service == "" {
					t.Fatalf("issue names no service: %v", i)
				}
			}
			if _, err := caddydocker.BuildRoutes(caddydocker.Discover(cs, labelOptions), routeOptions); err != nil {
				t.Fatal(err)
			}
		}
	})
}

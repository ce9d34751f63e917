// Package swarm maps Docker Swarm services to caddydocker Containers.
//
// Not wired into the docker app yet: this is the mapping a Swarm engine
// (ServiceList + TaskList) would feed to caddydocker's Discover and
// BuildRoutes, which stay as they are. It lives in a package of its own so
// that the live discovery code carries no unwired code; see "Docker Swarm
// (design, not yet wired)" in docs/caddydocker.md for the design and what
// wiring it in would change.
package swarm

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	dockerswarm "github.com/docker/docker/api/types/swarm"

	"github.com/apigate/gateway/caddydocker"
)

// Endpoint is the address of a Swarm service that the gateway dials.
type Endpoint string

const (
	// VIP dials the service's virtual IP: one upstream per service,
	// balanced over the tasks by Swarm (IPVS).
	VIP Endpoint = "vip"
	// Tasks dials every running task: one upstream per task, balanced
	// by the gateway.
	Tasks Endpoint = "tasks"
)

// Issue is something Containers has to say about one service
// (and, with Task set, one of its tasks). It names the service so that a
// log line leads to it.
type Issue struct {
	// ServiceID is the Swarm service ID.
	ServiceID string `json:"service_id,omitempty"`
	// Service is the service name (its ID when it has none).
	Service string `json:"service,omitempty"`
	// Task is the task ID when the issue is one task's.
	Task string `json:"task,omitempty"`
	// Reason says what is wrong and what to do.
	Reason string `json:"reason"`
	// Skipped is true when the service (or the task) got no Container;
	// false for a notice about a service that is still routed.
	Skipped bool `json:"skipped"`
}

func (e Issue) Error() string {
	var b strings.Builder
	b.WriteString("swarm")
	if e.Service != "" || e.ServiceID != "" {
		fmt.Fprintf(&b, " service %s", e.Service)
		if e.ServiceID != "" && e.ServiceID != e.Service {
			fmt.Fprintf(&b, " (%s)", e.ServiceID)
		}
	}
	if e.Task != "" {
		fmt.Fprintf(&b, " task %s", e.Task)
	}
	if e.Skipped {
		b.WriteString(" skipped")
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Containers maps Swarm services and their tasks (the answers of the
// Docker API's ServiceList and TaskList) to Containers, so that Discover
// and BuildRoutes route them as they route containers. It never panics and
// is a pure function of its inputs: the output is sorted by name, then ID.
//
// Only services whose own labels (Spec.Labels: deploy.labels in a compose
// file) carry gateway.enable are mapped; gateway.* labels on the container
// spec (compose labels:) are not read, and a service that has them only
// there is reported. A service with no running task gets no Container.
//
// mode VIP gives one Container per service: ID and Name are the
// service's, IP is its virtual IP. A service in endpoint mode dnsrr has no
// virtual IP and is mapped as in Tasks, with a notice. mode Tasks
// gives one Container per task that runs and is meant to (Status.State and
// DesiredState both "running"): ID is the task ID, Name is the task's
// container name "<service>.<slot>.<task ID>" (the node ID in place of the
// slot for a global service), and gateway.name defaults to the service
// name so that the tasks of one service share one upstream pool.
//
// network is the name or ID of the network the gateway shares with the
// services; the address is taken on it. With network "", the first network
// by name other than Swarm's ingress network is used. Network names are
// learnt from the tasks' network attachments, so tasks are needed in both
// modes.
//
// Health is left "": the task list carries no health, and Swarm only marks
// a task running once its health check passed. Ports are the service's
// published TCP ports (ingress and host mode, and in Tasks the host
// ports the task reports).
func Containers(services []dockerswarm.Service, tasks []dockerswarm.Task, mode Endpoint, network string) ([]caddydocker.Container, []Issue) {
	if mode != VIP && mode != Tasks {
		return nil, []Issue{{Reason: fmt.Sprintf("unknown endpoint mode %q: must be %q or %q", mode, VIP, Tasks), Skipped: true}}
	}
	m := mapper{network: network, nets: map[string]netInfo{}, running: map[string][]dockerswarm.Task{}}
	for _, t := range tasks {
		for _, a := range t.NetworksAttachments {
			if id := a.Network.ID; id != "" {
				n := m.nets[id]
				if n.name == "" {
					n.name = a.Network.Spec.Name
				}
				n.ingress = n.ingress || a.Network.Spec.Ingress
				m.nets[id] = n
			}
		}
		if t.ServiceID != "" && t.Status.State == dockerswarm.TaskStateRunning && t.DesiredState == dockerswarm.TaskStateRunning {
			m.running[t.ServiceID] = append(m.running[t.ServiceID], t)
		}
	}

	order := make([]int, len(services))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := &services[order[i]], &services[order[j]]
		if a.Spec.Name != b.Spec.Name {
			return a.Spec.Name < b.Spec.Name
		}
		return a.ID < b.ID
	})
	seen := map[string]bool{}
	for _, i := range order {
		s := &services[i]
		if s.ID != "" && seen[s.ID] {
			continue // listed twice
		}
		seen[s.ID] = true
		m.service(s, mode)
	}
	sort.Slice(m.out, func(i, j int) bool {
		if m.out[i].Name != m.out[j].Name {
			return m.out[i].Name < m.out[j].Name
		}
		return m.out[i].ID < m.out[j].ID
	})
	return m.out, m.issues
}

type netInfo struct {
	name    string
	ingress bool
}

// mapper collects the Containers and issues of one Containers call.
type mapper struct {
	network string
	nets    map[string]netInfo            // network ID -> name, from task attachments
	running map[string][]dockerswarm.Task // service ID -> running tasks
	out     []caddydocker.Container
	issues  []Issue
}

func (m *mapper) issue(s *dockerswarm.Service, task string, skipped bool, format string, args ...any) {
	m.issues = append(m.issues, Issue{ServiceID: s.ID, Service: serviceName(s), Task: task,
		Reason: fmt.Sprintf(format, args...), Skipped: skipped})
}

func serviceName(s *dockerswarm.Service) string {
	if s.Spec.Name != "" {
		return s.Spec.Name
	}
	return s.ID
}

func (m *mapper) service(s *dockerswarm.Service, mode Endpoint) {
	labels := s.Spec.Labels
	var specLabels map[string]string
	if cs := s.Spec.TaskTemplate.ContainerSpec; cs != nil {
		specLabels = cs.Labels
	}
	if _, ok := labels[caddydocker.LabelPrefix+"enable"]; !ok {
		if _, ok := specLabels[caddydocker.LabelPrefix+"enable"]; ok {
			m.issue(s, "", true, "gateway.* labels are on the container spec (compose labels:), which Swarm mode does not read; "+
				"put them on the service (compose deploy.labels:, docker service create --label)")
		}
		return
	}
	if s.ID == "" {
		m.issue(s, "", true, "service has no ID")
		return
	}
	var ignored []string
	for k, v := range specLabels {
		if w, ok := labels[k]; strings.HasPrefix(k, caddydocker.LabelPrefix) && (!ok || w != v) {
			ignored = append(ignored, k)
		}
	}
	if len(ignored) > 0 {
		sort.Strings(ignored)
		m.issue(s, "", false, "container spec labels %s are ignored: only the service's labels (compose deploy.labels:) are read",
			strings.Join(ignored, ", "))
	}

	running := m.running[s.ID]
	if len(running) == 0 {
		m.issue(s, "", true, "no running task")
		return
	}
	dnsrr := false
	if es := s.Spec.EndpointSpec; es != nil {
		dnsrr = es.Mode == dockerswarm.ResolutionModeDNSRR
	} else {
		dnsrr = s.Endpoint.Spec.Mode == dockerswarm.ResolutionModeDNSRR
	}
	if mode == VIP && !dnsrr {
		m.vip(s, labels)
		return
	}
	if mode == VIP {
		m.issue(s, "", false, "endpoint mode dnsrr has no virtual IP: routed to its running tasks")
	}
	m.tasks(s, labels, running)
}

// vip adds the service itself, at its virtual IP.
func (m *mapper) vip(s *dockerswarm.Service, labels map[string]string) {
	var cands []address
	for _, v := range s.Endpoint.VirtualIPs {
		cands = append(cands, m.addr(v.NetworkID, v.Addr))
	}
	c := caddydocker.Container{ID: s.ID, Name: serviceName(s), Labels: cloneLabels(labels), Ports: ports(s, nil)}
	ip, reason := pickAddr(cands, m.network)
	if ip == "" && !hasLabel(labels, "address") {
		m.issue(s, "", true, "no virtual IP %s; attach the service to the gateway's network or set gateway.address", reason)
		return
	}
	c.IP = ip
	m.out = append(m.out, c)
}

// tasks adds one Container per running task, at the task's own address.
func (m *mapper) tasks(s *dockerswarm.Service, labels map[string]string, running []dockerswarm.Task) {
	name := serviceName(s)
	labels = cloneLabels(labels)
	if strings.TrimSpace(labels[caddydocker.LabelPrefix+"name"]) == "" {
		// A task's container name differs per task; without this each
		// task would be a service of its own.
		labels[caddydocker.LabelPrefix+"name"] = name
	}
	running = append([]dockerswarm.Task(nil), running...)
	sort.SliceStable(running, func(i, j int) bool {
		return taskName(name, &running[i]) < taskName(name, &running[j])
	})
	for i := range running {
		t := &running[i]
		if t.ID == "" {
			m.issue(s, "", true, "a running task has no ID")
			continue
		}
		var cands []address
		for _, a := range t.NetworksAttachments {
			for _, addr := range a.Addresses {
				cands = append(cands, m.addr(a.Network.ID, addr))
			}
		}
		ip, reason := pickAddr(cands, m.network)
		if ip == "" && !hasLabel(labels, "address") {
			m.issue(s, t.ID, true, "no task address %s; attach the service to the gateway's network or set gateway.address", reason)
			continue
		}
		m.out = append(m.out, caddydocker.Container{ID: t.ID, Name: taskName(name, t), Labels: labels, IP: ip, Ports: ports(s, t)})
	}
}

// taskName is the name Swarm gives a task's container (swarmkit's
// naming.Task): <service>.<slot>.<task ID>, the node ID in place of the
// slot for a global service's task.
func taskName(service string, t *dockerswarm.Task) string {
	if t.Name != "" {
		return t.Name
	}
	slot := t.NodeID
	if t.Slot != 0 {
		slot = strconv.Itoa(t.Slot)
	}
	return service + "." + slot + "." + t.ID
}

// address is one address of a service or task on one network.
type address struct {
	netID, net string
	ingress    bool
	ip         string // "" when the address does not parse
}

func (m *mapper) addr(netID, cidr string) address {
	n := m.nets[netID]
	a := address{netID: netID, net: n.name, ingress: n.ingress, ip: stripMask(cidr)}
	if a.net == "" {
		a.net = netID
	}
	return a
}

// stripMask returns the IP of "10.0.1.5/24" (or of a bare IP), or "".
func stripMask(s string) string {
	s = strings.TrimSpace(s)
	if ip, _, err := net.ParseCIDR(s); err == nil {
		return ip.String()
	}
	if ip := net.ParseIP(s); ip != nil {
		return ip.String()
	}
	return ""
}

// pickAddr returns the address on network (a name or an ID), or, with
// network "", on the first network by name that is not the ingress network.
// When there is none, it returns "" and the reason ("on network x", ...).
func pickAddr(cands []address, network string) (string, string) {
	if network != "" {
		for _, a := range cands {
			if a.ip != "" && (a.netID == network || a.net == network) {
				return a.ip, ""
			}
		}
		return "", fmt.Sprintf("on network %q (on: %s)", network, netList(cands))
	}
	best := -1
	for i, a := range cands {
		if a.ip == "" || a.ingress {
			continue
		}
		if best < 0 || a.net < cands[best].net || a.net == cands[best].net && a.netID < cands[best].netID {
			best = i
		}
	}
	if best < 0 {
		return "", fmt.Sprintf("on a network other than ingress (on: %s)", netList(cands))
	}
	return cands[best].ip, ""
}

func netList(cands []address) string {
	var names []string
	for _, a := range cands {
		n := a.net
		if n == "" {
			n = "?"
		}
		if a.ip == "" {
			n += " without a valid address"
		}
		names = append(names, n)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) == 0 {
		return "no network"
	}
	return strings.Join(names, ", ")
}

// ports are the published TCP ports of a service, and of task t when
// it is not nil (host mode ports, as the task reports them, come first).
func ports(s *dockerswarm.Service, t *dockerswarm.Task) []caddydocker.Port {
	var pcs []dockerswarm.PortConfig
	if t != nil {
		pcs = append(pcs, t.Status.PortStatus.Ports...)
	}
	pcs = append(pcs, s.Endpoint.Ports...)
	var out []caddydocker.Port
	for _, p := range pcs {
		if p.PublishedPort == 0 || p.TargetPort == 0 || p.PublishedPort > 65535 || p.TargetPort > 65535 ||
			(p.Protocol != "" && p.Protocol != dockerswarm.PortConfigProtocolTCP) {
			continue
		}
		dup := false
		for _, q := range out {
			dup = dup || q.Private == int(p.TargetPort)
		}
		if !dup {
			out = append(out, caddydocker.Port{Private: int(p.TargetPort), Public: int(p.PublishedPort)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Private < out[j].Private })
	return out
}

func cloneLabels(in map[string]string) map[string]string {
	out := make(map[string]string, len(in)+1)
	for k, v := range in {
		out[k] = v
	}
	return out
}

func hasLabel(labels map[string]string, key string) bool {
	_, ok := labels[caddydocker.LabelPrefix+key]
	return ok
}

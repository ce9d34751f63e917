package caddydocker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
)

// Engine is the container engine as the watcher sees it.
type Engine interface {
	// List returns the running containers that carry a gateway.enable label.
	List(ctx context.Context) ([]Container, error)
	// Events streams container events until ctx ends or the stream breaks;
	// it calls subscribed once the engine has answered the subscription
	// (events from then on reach fn), fn for every event that may change
	// the route set, and returns the error that ended the stream (nil when
	// ctx ended).
	Events(ctx context.Context, subscribed func(), fn func(Event)) error
	// Close releases the client.
	Close() error
	// StopsUnannounced reports whether the engine begins stopping a
	// container without saying so in an event: Podman's `podman stop`
	// signals the process and sends its stop event only after the process
	// exited. Such a container leaves the running list at once, so the
	// watcher re-lists every StopPoll while this host has routed
	// containers. True until the engine said which it is.
	StopsUnannounced() bool
}

// DefaultHost returns the engine address used when none is configured:
// DOCKER_HOST, else the Docker socket.
func DefaultHost() string {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	return client.DefaultDockerHost
}

type dockerEngine struct {
	cli *client.Client

	// vmu serialises API version negotiation: the client negotiates on
	// its first request, and two goroutines (list and events) doing that
	// at once race on the client's version field while the engine is
	// unreachable. ready() settles it before any other call.
	vmu       sync.Mutex
	vsettled  bool
	podman    atomic.Bool // the engine is Podman (its /version says so)
	kindKnown atomic.Bool // /version answered

	// net caches the facts of running opted-in containers that the list
	// does not report (Podman's compat list has no HostConfig, networks or
	// health), from one inspect per container.
	mu  sync.Mutex
	net map[string]netInfo
}

type netInfo struct {
	host        bool
	ip          string
	healthCheck bool
}

// NewDockerEngine returns an Engine speaking the Docker API at host
// (unix:///path, tcp://host:port), which Docker and Podman both serve.
// No connection is made until the first call.
func NewDockerEngine(host string) (Engine, error) {
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client for %q: %w", host, err)
	}
	return &dockerEngine{cli: cli}, nil
}

func (e *dockerEngine) Close() error { return e.cli.Close() }

// ready negotiates the API version once, before the first real call.
func (e *dockerEngine) ready(ctx context.Context) error {
	e.vmu.Lock()
	defer e.vmu.Unlock()
	if e.vsettled {
		return nil
	}
	ping, err := e.cli.Ping(ctx)
	if err != nil {
		return err
	}
	e.cli.NegotiateAPIVersionPing(ping)
	e.vsettled = true
	// Which engine it is comes from /version, which Podman takes about
	// 2 s to answer (it gathers host facts): asked in the background, so
	// that the first list, and a restarted gateway's routes, do not wait
	// for it (issue 37).
	go e.learnKind()
	return nil
}

// learnKind asks the engine's /version whether it is Podman.
func (e *dockerEngine) learnKind() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := e.cli.ServerVersion(ctx)
	if err != nil {
		e.vmu.Lock()
		e.vsettled = false // ask again at the next call
		e.vmu.Unlock()
		return
	}
	e.podman.Store(isPodman(v))
	e.kindKnown.Store(true)
}

// isPodman reports whether an engine's version answer is Podman's: its
// Docker-compatible API names the component "Podman Engine".
func isPodman(v types.Version) bool {
	for _, c := range v.Components {
		if strings.Contains(strings.ToLower(c.Name), "podman") {
			return true
		}
	}
	return strings.Contains(strings.ToLower(v.Platform.Name), "podman")
}

func (e *dockerEngine) StopsUnannounced() bool { return e.podman.Load() || !e.kindKnown.Load() }

func (e *dockerEngine) List(ctx context.Context) ([]Container, error) {
	if err := e.ready(ctx); err != nil {
		return nil, err
	}
	list, err := e.cli.ContainerList(ctx, container.ListOptions{
		Filters: filters.NewArgs(filters.Arg("label", LabelPrefix+"enable")),
	})
	if err != nil {
		return nil, err
	}
	out := make([]Container, 0, len(list))
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := make(map[string]netInfo, len(list))
	for _, s := range list {
		c := fromSummary(s)
		if !Enabled(c.Labels) {
			out = append(out, c)
			continue
		}
		// At most one inspect per container and list: for a new
		// container (the facts below), and again at each list for one
		// with a health check unless the list's Status says its health
		// (Docker's does, Podman's does not).
		var insp *container.InspectResponse
		ni, known := e.net[s.ID]
		if !known || ni.healthCheck && c.Health == "" {
			r, err := e.cli.ContainerInspect(ctx, s.ID)
			if err != nil {
				if client.IsErrNotFound(err) {
					continue // gone since the list
				}
				return nil, err
			}
			insp = &r
			if !known {
				ni = inspected(r)
			}
		}
		seen[s.ID] = ni
		if !c.HostNetwork && c.IP == "" {
			c.HostNetwork = ni.host
			if !ni.host {
				c.IP = ni.ip
			}
		}
		if ni.healthCheck && c.Health == "" {
			if insp.State != nil && insp.State.Health != nil {
				c.Health = insp.State.Health.Status
			}
			if c.Health == "" || c.Health == "none" {
				c.Health = "starting"
			}
		}
		out = append(out, c)
	}
	e.net = seen
	return out, nil
}

// inspected reads what the list does not report: the network mode, the
// first network address, and whether the container has a health check.
func inspected(insp container.InspectResponse) netInfo {
	var ni netInfo
	if insp.HostConfig != nil {
		ni.host = insp.HostConfig.NetworkMode.IsHost()
	}
	if insp.Config != nil && insp.Config.Healthcheck != nil {
		test := insp.Config.Healthcheck.Test
		ni.healthCheck = len(test) > 0 && test[0] != "NONE"
	}
	if insp.NetworkSettings != nil {
		ni.ip, _ = firstIP(insp.NetworkSettings.Networks)
		if ni.ip == "" && insp.NetworkSettings.IPAddress != "" {
			ni.ip = insp.NetworkSettings.IPAddress
		}
	}
	return ni
}

// firstIP returns the first address over the networks sorted by name, and
// whether one of them is the host network.
func firstIP(networks map[string]*network.EndpointSettings) (ip string, host bool) {
	names := make([]string, 0, len(networks))
	for n := range networks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		host = host || n == "host"
		if ep := networks[n]; ep != nil && ep.IPAddress != "" && ip == "" {
			ip = ep.IPAddress
		}
	}
	return ip, host
}

func fromSummary(s container.Summary) Container {
	c := Container{ID: s.ID, Labels: s.Labels}
	if len(s.Names) > 0 {
		c.Name = strings.TrimPrefix(s.Names[0], "/")
	}
	if c.Name == "" {
		c.Name = s.ID
	}
	mode := s.HostConfig.NetworkMode
	c.HostNetwork = mode == "host"
	if s.NetworkSettings != nil {
		ip, host := firstIP(s.NetworkSettings.Networks)
		c.IP, c.HostNetwork = ip, c.HostNetwork || host
	}
	if c.HostNetwork {
		c.IP = ""
	}
	for _, p := range s.Ports {
		if p.PublicPort == 0 || (p.Type != "" && p.Type != "tcp") {
			continue
		}
		dup := false
		for _, q := range c.Ports {
			dup = dup || q.Private == int(p.PrivatePort)
		}
		if !dup { // the same mapping on 0.0.0.0 and [::]
			c.Ports = append(c.Ports, Port{Private: int(p.PrivatePort), Public: int(p.PublicPort)})
		}
	}
	sort.Slice(c.Ports, func(i, j int) bool { return c.Ports[i].Private < c.Ports[j].Private })
	st := strings.ToLower(s.Status)
	switch {
	case strings.Contains(st, "(unhealthy)"):
		c.Health = "unhealthy"
	case strings.Contains(st, "starting)"):
		c.Health = "starting"
	case strings.Contains(st, "(healthy)"):
		c.Health = "healthy"
	}
	return c
}

// Event is one container event.
type Event struct {
	// Action is the engine's action: start, die, kill, stop,
	// "health_status: healthy", ...
	Action string
	// ID is the container's ID.
	ID string
	// Signal is a kill event's signal as the engine reports it ("15",
	// "SIGTERM"); "" when it reports none (Podman).
	Signal string
}

// relevantActions are the container events after which the route set may
// differ. Other events (exec, attach, resize, top, ...) are ignored.
var relevantActions = map[string]bool{
	"start": true, "restart": true, "unpause": true, "pause": true,
	"die": true, "died": true, "stop": true, "destroy": true, "remove": true,
	"oom": true, "update": true, "rename": true, "cleanup": true,
	"health_status": true, "kill": true,
}

// Relevant reports whether a container event action may change routes.
func Relevant(action string) bool {
	if strings.HasPrefix(action, "health_status") {
		return true
	}
	return relevantActions[action]
}

func (e *dockerEngine) Events(ctx context.Context, subscribed func(), fn func(Event)) error {
	if err := e.ready(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The client returns once the engine answered the request's head;
	// when the request failed instead, errs holds the error (the loop
	// below returns it) and subscribed costs one list more.
	msgs, errs := e.cli.Events(ctx, events.ListOptions{
		Filters: filters.NewArgs(filters.Arg("type", string(events.ContainerEventType))),
	})
	subscribed()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				err = errors.New("event stream closed")
			}
			return err
		case m := <-msgs:
			action := string(m.Action)
			if action == "" {
				action = m.Status
			}
			if Relevant(action) {
				fn(Event{Action: action, ID: m.Actor.ID, Signal: m.Actor.Attributes["signal"]})
			}
		}
	}
}

package caddydocker

// Where discovered routes sit in a server: in the docker_routes handlers
// (handler.go) the config places, and by default (a server with none) in
// one in front of the server's own routes; the server ends with the
// catch-all. A Caddyfile gets them when it is adapted, so a gateway
// started from it routes from its first request; a JSON config without
// them gets them through the admin API once the app starts.

import (
	"encoding/json"
	"fmt"

	"github.com/apigate/gateway/internal/caddyfileerr"
)

func init() {
	caddyfileerr.AfterAdapt(adaptStep)
}

// adaptStep completes an adapted Caddyfile that has a docker app: the
// server its routes go to gets the docker_routes handlers it lacks
// (EnsureHandlers). A config it cannot read, or whose server is not
// clear, is left as it is: loading it says what is wrong.
func adaptStep(cfg []byte, _ map[string]any) (caddyfileerr.Adapted, error) {
	out, _, err := placeHandlers(cfg)
	if err != nil {
		return caddyfileerr.Adapted{Config: cfg}, nil
	}
	return caddyfileerr.Adapted{Config: out}, nil
}

// placeHandlers returns config (Caddy JSON) with the docker_routes
// handlers placed in the server of its docker app, and that server's
// name; config comes back as it is when it has no docker app or nothing
// to add.
func placeHandlers(config []byte) (out []byte, server string, err error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(config, &cfg); err != nil {
		return nil, "", fmt.Errorf("config is not a JSON object: %v", err)
	}
	var apps map[string]json.RawMessage
	if raw, ok := cfg["apps"]; ok {
		if err := json.Unmarshal(raw, &apps); err != nil {
			return nil, "", fmt.Errorf("config apps: %v", err)
		}
	}
	rawDocker, ok := apps["docker"]
	if !ok {
		return config, "", nil
	}
	var docker struct {
		Server string `json:"server"`
	}
	if err := json.Unmarshal(rawDocker, &docker); err != nil {
		return nil, "", fmt.Errorf("docker app: %v", err)
	}
	var httpApp map[string]json.RawMessage
	if err := json.Unmarshal(apps["http"], &httpApp); err != nil || httpApp == nil {
		return nil, "", fmt.Errorf("docker app without an http app in the config")
	}
	var servers map[string]json.RawMessage
	if err := json.Unmarshal(httpApp["servers"], &servers); err != nil || servers == nil {
		return nil, "", fmt.Errorf("http app without servers in the config")
	}
	server = docker.Server
	if server == "" {
		names := make([]string, 0, len(servers))
		for name := range servers {
			names = append(names, name)
		}
		if server, err = onlyServer(names); err != nil {
			return nil, "", err
		}
	}
	var srv map[string]json.RawMessage
	if err := json.Unmarshal(servers[server], &srv); err != nil || srv == nil {
		return nil, "", fmt.Errorf("docker app: server %q is not an HTTP server of the config", server)
	}
	var own []json.RawMessage
	if raw, ok := srv["routes"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &own); err != nil {
			return nil, "", fmt.Errorf("routes of server %q: %v", server, err)
		}
	}
	placed := EnsureHandlers(server, own)
	if SameRoutes(own, placed) {
		return config, server, nil
	}
	if srv["routes"], err = json.Marshal(placed); err != nil {
		return nil, "", err
	}
	if servers[server], err = json.Marshal(srv); err != nil {
		return nil, "", err
	}
	if httpApp["servers"], err = json.Marshal(servers); err != nil {
		return nil, "", err
	}
	if apps["http"], err = json.Marshal(httpApp); err != nil {
		return nil, "", err
	}
	if cfg["apps"], err = json.Marshal(apps); err != nil {
		return nil, "", err
	}
	out, err = json.Marshal(cfg)
	return out, server, err
}

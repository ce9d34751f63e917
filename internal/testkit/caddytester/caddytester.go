// Package caddytester loads a config into the Caddy that runs inside a
// test binary, for the modules' end-to-end tests, and hands back Caddy's
// caddytest.Tester for the requests.
package caddytester

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddytest"
)

// Load loads config (a Caddyfile) into the test binary's Caddy and returns
// a tester bound to t. The config must put the admin API on adminPort.
//
// It loads in process (caddy.Load) rather than through caddytest's
// InitServer, for two reasons seen in CI:
//   - InitServer first GETs /config/ to see whether Caddy runs. Every load
//     replaces the admin server, and a GET that reaches the old one as it
//     shuts down fails; InitServer then starts a second Caddy (caddycmd.Main
//     with an admin-only config) whose load can land after the test's own
//     and replace it (fastpath TestH2HPACKBomb: "POSTed configuration
//     isn't active").
//   - On Linux every load binds new SO_REUSEPORT sockets beside the old
//     config's, and the kernel spreads new connections over both until the
//     old ones close. A connection the old server accepted is dropped when
//     it shuts down (net/http answers no request read after Shutdown
//     began), and one queued on a closing socket is reset unless
//     net.ipv4.tcp_migrate_req is set (internal/deny's reload test: EOF).
//
// So when Load returns, the config runs and every port its HTTP servers
// listen on has exactly their listening sockets left (and a port the
// previous config dropped none). The admin API's port is not waited for:
// Caddy starts each admin server from a goroutine that reads the global
// server when it runs, so two loads in quick succession can leave the
// older listener served by the newer server until the next load (seen
// under -race: StopServers' load right after a test's), a second socket
// that never closes by itself and answers as the current one.
func Load(t *testing.T, adminPort int, config string) *caddytest.Tester {
	t.Helper()
	return load(t, adminPort, config, "caddyfile")
}

// LoadJSON is Load for a JSON config.
func LoadJSON(t *testing.T, adminPort int, config string) *caddytest.Tester {
	t.Helper()
	return load(t, adminPort, config, "json")
}

func load(t *testing.T, adminPort int, config, adapter string) *caddytest.Tester {
	t.Helper()
	js := []byte(config)
	if adapter != "json" {
		out, _, err := caddyconfig.GetAdapter(adapter).Adapt(js, nil)
		if err != nil {
			t.Fatalf("adapting the %s config: %v", adapter, err)
		}
		js = out
	}
	if err := checkAdmin(js, adminPort); err != nil {
		t.Fatal(err)
	}
	ports, err := ServerPorts(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(js, true); err != nil {
		t.Fatalf("loading the config: %v", err)
	}
	settle(t, ports)
	return caddytest.NewTester(t).WithDefaultOverrides(caddytest.Config{
		AdminPort:          adminPort,
		LoadRequestTimeout: 30 * time.Second,
		TestRequestTimeout: 30 * time.Second,
	})
}

// checkAdmin refuses a config whose admin API is not on
// localhost:adminPort: the default (2019) would be shared by the test
// binaries that run at once.
func checkAdmin(js []byte, adminPort int) error {
	var cfg struct {
		Admin *struct {
			Disabled bool   `json:"disabled"`
			Listen   string `json:"listen"`
		} `json:"admin"`
	}
	if err := json.Unmarshal(js, &cfg); err != nil {
		return fmt.Errorf("reading the config: %v", err)
	}
	want := fmt.Sprintf("localhost:%d", adminPort)
	if cfg.Admin == nil || (!cfg.Admin.Disabled && cfg.Admin.Listen != want) {
		return fmt.Errorf("the config's admin API is not on %s (admin: %+v)", want, cfg.Admin)
	}
	return nil
}

// ServerPorts returns, for each TCP port a config's HTTP servers listen
// on (as its JSON names them), how many sockets they listen with there.
func ServerPorts(js []byte) (map[int]int, error) {
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Listen []string `json:"listen"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(js, &cfg); err != nil {
		return nil, fmt.Errorf("reading the config: %v", err)
	}
	addrs := []string{}
	for _, s := range cfg.Apps.HTTP.Servers {
		addrs = append(addrs, s.Listen...)
	}
	ports := map[int]int{}
	for _, a := range addrs {
		na, err := caddy.ParseNetworkAddress(a)
		if err != nil {
			return nil, fmt.Errorf("listen address %q: %v", a, err)
		}
		if na.IsUnixNetwork() || na.IsFdNetwork() || !strings.HasPrefix(na.Network, "tcp") {
			continue
		}
		for p := na.StartPort; p <= na.EndPort; p++ {
			ports[int(p)]++
		}
	}
	return ports, nil
}

// WaitListeners polls until each port has exactly the given number of
// listening TCP sockets in this network namespace (0: none), for at most
// timeout: after a config load, the previous config's sockets on the same
// ports are closed (the kernel spreads new connections over every socket
// of a SO_REUSEPORT port, the old server's too).
func WaitListeners(ports map[int]int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		have, err := listening()
		if err != nil {
			return fmt.Errorf("reading the listening sockets: %v", err)
		}
		settled := true
		for p, n := range ports {
			if have[p] != n {
				settled = false
				if time.Now().After(deadline) {
					return fmt.Errorf("port %d has %d listening sockets %v after the load, want %d (the previous config's servers still listen)", p, have[p], timeout, n)
				}
			}
		}
		if settled {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// listening counts the listening TCP sockets by local port.
func listening() (map[int]int, error) {
	out := map[int]int{}
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(name)
		if os.IsNotExist(err) && name == "/proc/net/tcp6" {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			// "  0: 0100007F:0B90 00000000:0000 0A ...": local address, remote, state
			f := strings.Fields(sc.Text())
			if len(f) < 4 || f[3] != "0A" {
				continue
			}
			i := strings.LastIndexByte(f[1], ':')
			port, err := strconv.ParseUint(f[1][i+1:], 16, 16)
			if err != nil {
				continue
			}
			out[int(port)]++
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// StopServers stops the servers of the config loaded in this test binary
// (if any), keeping the admin API on adminPort: a test whose config should
// start on fresh servers calls it before Load. Not for tests of what
// outlives a reload (caddyh1's pools).
func StopServers(t *testing.T, adminPort int) {
	t.Helper()
	if caddy.ActiveContext().Context == nil {
		return
	}
	if err := caddy.Load([]byte(fmt.Sprintf(`{"admin":{"listen":"localhost:%d"}}`, adminPort)), true); err != nil {
		t.Fatalf("stopping the previous config's servers: %v", err)
	}
	settle(t, map[int]int{})
}

// lastPorts are the ports of the config Load or StopServers loaded last
// in this test binary: a port the next config drops must close.
var lastPorts struct {
	sync.Mutex
	ports map[int]int
}

// settle waits for ports, and for the previous config's other ports to
// close, then remembers ports.
func settle(t testing.TB, ports map[int]int) {
	t.Helper()
	lastPorts.Lock()
	defer lastPorts.Unlock()
	want := map[int]int{}
	for p := range lastPorts.ports {
		want[p] = 0
	}
	for p, n := range ports {
		want[p] = n
	}
	if err := WaitListeners(want, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	lastPorts.ports = ports
}

package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// backendBody is the one response every proxy forwards: a small JSON object.
var backendBody = `{"id":42,"name":"widget","price":9.99,"tags":["a","b"],"in_stock":true}`

// body5k is the TLS scenarios' response: 5 KB of text.
var body5k = strings.Repeat("0123456789abcdef", 320)

// body10k is the gzip scenarios' response: a 10 KB JSON array of objects,
// as an API answers a list (compressible, but not trivially).
var body10k = func() string {
	var b strings.Builder
	b.WriteString("[")
	for i := 0; b.Len() < 10*1024-120; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%d,"sku":"W-%05d","name":"widget %d","price":%d.%02d,"in_stock":%v}`, i, i*7919%100000, i, 3+i%97, i%100, i%3 != 0)
	}
	b.WriteString("]")
	return b.String()
}()

// The backend's addresses: see configs/backend.nginx.conf.tmpl.
const (
	stubAddr = "127.0.0.1:19907"
)

// backendConf is the data of the backend's config template.
type backendConf struct {
	Work, WWW, Backend, StubAddr string
	BreakerUp                    []string
	Body                         string
}

// startBackend starts the nginx backend on the load core.
func (b *Bench) startBackend() (*Proc, error) {
	for _, d := range []string{"body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		os.MkdirAll(filepath.Join(b.Work, "nginx-tmp", d), 0o755)
	}
	www := filepath.Join(b.Work, "www")
	os.MkdirAll(www, 0o755)
	for name, body := range map[string]string{"5k.txt": body5k, "json10k.json": body10k} {
		if err := os.WriteFile(filepath.Join(www, name), []byte(body), 0o644); err != nil {
			return nil, err
		}
	}
	path := filepath.Join(b.confDir, "backend.nginx.conf")
	c := backendConf{Work: b.Work, WWW: www, Backend: backendAddr, StubAddr: stubAddr, BreakerUp: breakerHealthy[:], Body: backendBody}
	if err := b.renderAny("backend.nginx.conf.tmpl", path, c); err != nil {
		return nil, err
	}
	return startPinned("backend", coreLoad, filepath.Join(b.logDir, "backend.log"), nil,
		"nginx", "-p", b.Work, "-e", filepath.Join(b.Work, "backend-nginx-error.log"), "-c", path)
}

// backendAccepts is how many connections the backend has accepted, from
// nginx's stub_status (which counts its own connection too).
func backendAccepts() (float64, error) {
	resp, err := plainClient.Get("http://" + stubAddr + "/stub")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	// Active connections: 1
	// server accepts handled requests
	//  12 12 34
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "server accepts") && sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 3 {
				return strconv.ParseFloat(f[0], 64)
			}
		}
	}
	return 0, fmt.Errorf("stub_status: no accepts line")
}

// upstreamConnsSince is the connections the backend accepted since before
// (a reading of backendAccepts), less the reading's own connections.
func upstreamConnsSince(before float64) float64 {
	after, err := backendAccepts()
	if err != nil {
		return -1
	}
	return after - before - 1
}

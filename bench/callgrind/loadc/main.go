// loadc sends N GET requests over C keep-alive connections, each connection
// one request at a time, and exits. Allocation-light: raw bytes.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

func main() {
	n := flag.Int("n", 10000, "requests")
	c := flag.Int("c", 50, "connections")
	addr := flag.String("addr", "127.0.0.1:18080", "")
	path := flag.String("path", "/", "")
	hdr := flag.String("H", "", "extra header line(s), \\n separated")
	method := flag.String("method", "GET", "")
	bodyFile := flag.String("body", "", "a file sent as each request's body (with its Content-Length)")
	flag.Parse()
	var body []byte
	if *bodyFile != "" {
		var err error
		if body, err = os.ReadFile(*bodyFile); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		*hdr += `\nContent-Length: ` + strconv.Itoa(len(body))
		if *hdr != "" && (*hdr)[0] == '\\' {
			*hdr = (*hdr)[2:] // (no header before it)
		}
	}
	extra := ""
	if *hdr != "" {
		for _, l := range bytes.Split([]byte(*hdr), []byte(`\n`)) {
			extra += string(l) + "\r\n"
		}
	}
	req := []byte(*method + " " + *path + " HTTP/1.1\r\nHost: localhost\r\nUser-Agent: loadc\r\nAccept: */*\r\n" + extra + "\r\n")
	req = append(req, body...)
	var left atomic.Int64
	left.Store(int64(*n))
	var bad atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < *c; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", *addr)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			br := bufio.NewReaderSize(conn, 16<<10)
			for left.Add(-1) >= 0 {
				if _, err := conn.Write(req); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				cl := 0
				first := true
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(1)
					}
					if first && !bytes.HasPrefix(line, []byte("HTTP/1.1 200")) {
						bad.Add(1)
					}
					first = false
					if len(line) == 2 {
						break
					}
					if bytes.HasPrefix(line, []byte("Content-Length: ")) {
						cl, _ = strconv.Atoi(string(bytes.TrimSpace(line[16:])))
					}
				}
				br.Discard(cl)
			}
			conn.Close()
		}()
	}
	wg.Wait()
	if bad.Load() > 0 {
		fmt.Fprintln(os.Stderr, "non-200:", bad.Load())
		os.Exit(1)
	}
}

// Command testserver is the static HTTP server that caddydocker's Podman
// tests run in containers: testserver <port> <name> listens on
// 127.0.0.1:<port> and answers every request with "<name> <path>";
// /ws is a WebSocket that answers each text message m with "<name> m".
// It exits at once on SIGTERM or SIGINT (as PID 1 it must handle them).
package main

import (
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/net/websocket"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: testserver <port> <name>")
		os.Exit(2)
	}
	port, name := os.Args[1], os.Args[2]
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; os.Exit(0) }()
	http.Handle("/ws", websocket.Handler(func(c *websocket.Conn) {
		for {
			var m string
			if err := websocket.Message.Receive(c, &m); err != nil {
				return
			}
			if err := websocket.Message.Send(c, name+" "+m); err != nil {
				return
			}
		}
	}))
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Served-By", name)
		fmt.Fprintf(w, "%s %s", name, r.URL.Path)
	})
	if err := http.ListenAndServe("127.0.0.1:"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

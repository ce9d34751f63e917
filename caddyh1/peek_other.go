//go:build !linux

package caddyh1

import "net"

func socketFD(net.Conn) int { return -1 }

// peekIdle has no non-blocking peek off Linux: an idle connection is
// assumed alive, and a stale one is found when the request fails.
func (cn *conn) peekIdle() bool { return true }

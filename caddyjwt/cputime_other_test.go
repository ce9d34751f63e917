//go:build !unix

package caddyjwt

import "time"

func cpuTime() time.Duration { return 0 }

package caddydocker

import (
	"encoding/json"
	"testing"

	"github.com/docker/docker/api/types"
)

// TestIsPodman: the engine kind from /version answers as Podman 4.3 and
// Docker 28 give them (abridged).
func TestIsPodman(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       bool
	}{
		{"podman 4.3", `{"Platform":{"Name":"linux/amd64/debian-12"},"Components":[{"Name":"Podman Engine","Version":"4.3.1"}],"Version":"4.3.1","ApiVersion":"1.41"}`, true},
		{"docker 28", `{"Platform":{"Name":"Docker Engine - Community"},"Components":[{"Name":"Engine","Version":"28.5.2"},{"Name":"containerd"},{"Name":"runc"}],"Version":"28.5.2","ApiVersion":"1.51"}`, false},
		{"empty", `{}`, false},
	} {
		var v types.Version
		if err := json.Unmarshal([]byte(tc.body), &v); err != nil {
			t.Fatal(err)
		}
		if got := isPodman(v); got != tc.want {
			t.Errorf("%s: isPodman = %v, want %v", tc.name, got, tc.want)
		}
	}
}

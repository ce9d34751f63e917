package caddyquota

import (
	"encoding/json"
	"testing"
)

// TestNodeStampJSON: the stamp both documents' entries embed is written
// as the entry's own fields, as before it was shared (the fleet's
// gateways of the older layout read the same documents).
func TestNodeStampJSON(t *testing.T) {
	stamp := nodeStamp{Rate: 2.5, Leases: 3, Saw: map[string]int64{"b": 2}, Passive: true, Leasing: true, Seen: 1700000000000}
	for _, tc := range []struct {
		name string
		node any
		want string
	}{
		{"month", &monthNode{Take: 7, Days: map[string]*dayNode{"06": {Take: 7, Admitted: 5}}, nodeStamp: stamp},
			`{"take":7,"days":{"06":{"take":7,"admitted":5}},"rate":2.5,"leases":3,"saw":{"b":2},"passive":true,"leasing":true,"seen":1700000000000}`},
		{"sliding", &slideNode{Minute: map[string]int64{"100": 4}, nodeStamp: stamp},
			`{"minute":{"100":4},"rate":2.5,"leases":3,"saw":{"b":2},"passive":true,"leasing":true,"seen":1700000000000}`},
		{"month, an older gateway's", &monthNode{nodeStamp: nodeStamp{Leases: 1, Seen: 5}},
			`{"leases":1,"seen":5}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.node)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("written\n%s\nwant\n%s", b, tc.want)
			}
			var back monthNode
			if err := json.Unmarshal([]byte(tc.want), &back); err != nil {
				t.Fatal(err)
			}
			if tc.name != "sliding" && back.Seen != tc.node.(*monthNode).Seen {
				t.Errorf("read back seen %d", back.Seen)
			}
		})
	}
}

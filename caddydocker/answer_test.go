package caddydocker

import (
	"github.com/apigate/gateway/internal/deny"
)

// answerBody is the body of the gateway's answer of kind code (no_route,
// no_healthy_upstream, discovery_starting) to a request for path, as a
// client reads it: the problem every refusal is.
func answerBody(code, path string) string {
	detail := map[string]string{"no_route": NoRouteDetail, "no_healthy_upstream": NoHealthyUpstreamDetail,
		"discovery_starting": DiscoveryStartingDetail}[code]
	p := deny.New(deny.KindOf(code, 0).Status, code, detail)
	p.Instance = path
	return string(p.JSON())
}

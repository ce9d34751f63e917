// Package gateway is what xcaddy compiles into the gateway binary: importing
// it registers every module of this repository with Caddy.
//
//	xcaddy build v2.11.9 \
//		--with github.com/apigate/gateway@v0.0.0=. \
//		--with github.com/mholt/caddy-ratelimit@v0.1.0
package gateway

import (
	// the gateway's modules
	_ "github.com/apigate/gateway/caddyapikey"
	_ "github.com/apigate/gateway/caddyaudit"
	_ "github.com/apigate/gateway/caddyclientcert"
	_ "github.com/apigate/gateway/caddydocker"
	_ "github.com/apigate/gateway/caddyh1"
	_ "github.com/apigate/gateway/caddyjwt"
	_ "github.com/apigate/gateway/caddyoidc"
	_ "github.com/apigate/gateway/caddyopenapi"
	_ "github.com/apigate/gateway/caddypathguard"
	_ "github.com/apigate/gateway/caddypermcache"
	_ "github.com/apigate/gateway/caddyquota"
	_ "github.com/apigate/gateway/caddyrbac"
	_ "github.com/apigate/gateway/caddyready"
	_ "github.com/apigate/gateway/dashboard"
	_ "github.com/apigate/gateway/fastpath"
	_ "github.com/apigate/gateway/natsstore"

	// Caddyfile errors that name the bad line once
	_ "github.com/apigate/gateway/internal/caddyfileerr"
)

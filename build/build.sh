#!/usr/bin/env bash
# Builds the gateway: Caddy v2 with this repository's modules and
# github.com/mholt/caddy-ratelimit compiled in, into bin/caddy, with xcaddy.
#
#   build/build.sh              # bin/caddy
#   OUTPUT=/usr/local/bin/caddy build/build.sh
#   EXTRA_PLUGINS="github.com/you/plugin@v1.2.3" build/build.sh
#
# Needs Go (see build/ensure-go.sh); installs xcaddy into $(go env GOPATH)/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
source build/versions.env
source build/ensure-go.sh

OUTPUT=${OUTPUT:-$ROOT/bin/caddy}
XCADDY=$(go env GOPATH)/bin/xcaddy
if ! "$XCADDY" version 2>/dev/null | grep -q "$XCADDY_VERSION"; then
	echo "build: installing xcaddy $XCADDY_VERSION" >&2
	GOFLAGS= go install "github.com/caddyserver/xcaddy/cmd/xcaddy@$XCADDY_VERSION"
fi

with=(--with "github.com/apigate/gateway@v0.0.0=$ROOT"
	--with "github.com/mholt/caddy-ratelimit@$RATELIMIT_VERSION")
for p in ${EXTRA_PLUGINS:-}; do with+=(--with "$p"); done

mkdir -p "$(dirname "$OUTPUT")"
echo "build: xcaddy build $CADDY_VERSION -> $OUTPUT (a few minutes on a cold cache)" >&2
XCADDY_SKIP_CLEANUP=0 XCADDY_SETCAP=0 XCADDY_SUDO=0 CGO_ENABLED=0 \
	"$XCADDY" build "$CADDY_VERSION" --output "$OUTPUT" "${with[@]}"
"$OUTPUT" version >&2

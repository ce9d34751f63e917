# Sourced by the build and test scripts: makes sure a Go toolchain new enough
# for go.mod is on PATH. On a fresh Debian machine it installs Debian's Go and
# lets Go's toolchain switch (GOTOOLCHAIN=auto, from the Go module proxy)
# fetch the version go.mod asks for.
if [ -x /usr/local/go/bin/go ]; then export PATH=/usr/local/go/bin:$PATH; fi
export PATH=$PATH:$(command -v go >/dev/null 2>&1 && go env GOPATH || echo "$HOME/go")/bin
if ! command -v go >/dev/null 2>&1; then
	echo "build: Go not found; installing Debian's golang-go" >&2
	if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
	$SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go ca-certificates git >&2
fi
have=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$GO_MIN" "$have" | sort -V | head -1)" != "$GO_MIN" ]; then
	echo "build: Go $have is older than $GO_MIN; asking Go to fetch a newer toolchain" >&2
	export GOTOOLCHAIN=go${GO_MIN}.0+auto
fi

# The gateway's everyday commands. Each calls a script in scripts/ or build/,
# which installs what it needs.
.PHONY: run test build bench soak fmt vet fuzz

run:            ## build the gateway and run it on Caddyfile.example
	scripts/run

test:           ## run every test, as CI does
	scripts/test

build:          ## build bin/caddy with xcaddy
	build/build.sh

bench:          ## the side-by-side benchmark against real peers (bench/README.md)
	bench/run

soak:           ## all duties under load for 10 minutes (not in CI)
	scripts/soak

fuzz:           ## every fuzz target for a bounded time
	scripts/fuzz

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	go vet ./...

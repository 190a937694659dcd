#!/usr/bin/env bash
# Runs Portico's whole test suite: installs the system packages the tests
# need, builds the Kubernetes control plane they run against (cached after the
# first time, see hack/kube-binaries.sh) and the other real parts the tests
# run (Pebble, h2spec, an OpenID provider), checks formatting, vet and module
# tidiness, then runs every test with the race detector. Arguments replace
# the default package pattern ./...
set -euo pipefail
# Portico needs Go 1.27; the go command fetches this toolchain itself.
export GOTOOLCHAIN=go1.27.3
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./hack/install-deps.sh
# nginx, haproxy and caddy, which bench/sidebyside's test runs next to Portico.
./hack/bench-peers.sh
# Built here rather than by the first test that needs it, so that a cold
# build (minutes) does not count against any test's timeout.
./hack/kube-binaries.sh >/dev/null
./hack/pebble.sh >/dev/null
# The OpenID provider proxy's OIDC test logs in against.
./hack/oidc-provider.sh >/dev/null
# h2spec, which proxy.TestH2Spec runs against the HTTP/2 server; named here
# so that the test runs rather than skips. Assigned apart from the export,
# whose status would hide a failed build.
PORTICO_H2SPEC="$(./hack/h2spec.sh)"
export PORTICO_H2SPEC

pkgs=("$@")
if ((${#pkgs[@]} == 0)); then
	pkgs=(./...)
fi

unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))"
if [[ -n "$unformatted" ]]; then
	echo "gofmt: these files need formatting:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go mod tidy -diff >&2 || { echo "go.mod/go.sum are not tidy (run go mod tidy)" >&2; exit 1; }
go vet "${pkgs[@]}"
go test -race -count=1 -timeout 45m "${pkgs[@]}"
# Under the race detector internal/dataplane/sockio reads and writes sockets through
# the syscall package (sys_race.go); the raw calls that the real binary
# makes are tested here, under sockio's own tests and the proxy's.
if (($# == 0)); then
	go test -count=1 -timeout 20m ./internal/dataplane/sockio/ ./proxy/
fi

# The upstream Gateway API conformance suite, on a real control plane, with
# the standard-channel CRDs, then with the experimental-channel ones, then
# with a GatewayClass whose Gateways each get a data plane of their own
# (GEP-1762); each run ends with the line
# "conformance: N passed, N failed, N skipped".
if (($# == 0)); then
	./hack/conformance.sh
	./hack/conformance.sh --channel experimental
	./hack/conformance.sh --per-gateway
fi

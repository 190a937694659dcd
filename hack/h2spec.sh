#!/usr/bin/env bash
# Builds h2spec, the HTTP/2 conformance tester that Portico's tests run
# against its HTTP/2 server (proxy/h2spec_test.go), from the module pinned in
# hack/h2specbin/go.mod, into a cache outside the repository:
#
#   ${PORTICO_CACHE:-$HOME/.cache/portico}/bin/h2spec-<version>/h2spec
#
# A binary that is already there is not built again, so a second run takes
# well under a second. On success the last line on stdout is the binary's
# path, what PORTICO_H2SPEC names for the tests; progress goes to stderr.
set -euo pipefail
# Portico needs Go 1.27; the go command fetches this toolchain itself. h2spec
# has no go.mod of its own (it is required as +incompatible), so the pinning
# module's go line is the one that counts and this toolchain builds it.
export GOTOOLCHAIN=go1.27.3

trap 'echo "h2spec: failed (line ${LINENO})" >&2' ERR

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="${here}/h2specbin"

# The module is its own world: a go.work or module flags of the caller must
# not leak into it.
export GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0

h2spec_module=github.com/summerwind/h2spec
version="$(cd "$mod" && go list -m -f '{{.Version}}' "$h2spec_module")"
if [[ ! "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(\+incompatible)?$ ]]; then
	echo "h2spec: unexpected ${h2spec_module} version '${version}'" >&2
	exit 1
fi

# shellcheck source=hack/lib/cached-build.sh
source "${here}/lib/cached-build.sh"
dir="$(cache_dir "h2spec-${version}")"
lock_dir "$dir"

build_cached h2spec "$mod" "$dir" h2spec "${h2spec_module}/cmd/h2spec" "-s -w"

"${dir}/h2spec" --version >/dev/null 2>&1 || {
	echo "h2spec: ${dir}/h2spec does not run" >&2
	exit 1
}

echo "${dir}/h2spec"

#!/usr/bin/env bash
# Builds the ACME test server that Portico's tests obtain certificates from
# (pebble and pebble-challtestsrv) from the module pinned in
# hack/pebblebin/go.mod, into a cache outside the repository:
#
#   ${PORTICO_CACHE:-$HOME/.cache/portico}/bin/pebble-<version>/
#
# A binary that is already there is not built again, so a second run takes
# well under a second. On success the last line on stdout is that directory;
# progress goes to stderr.
set -euo pipefail
# Portico needs Go 1.27; the go command fetches this toolchain itself.
export GOTOOLCHAIN=go1.27.3

trap 'echo "pebble: failed (line ${LINENO})" >&2' ERR

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="${here}/pebblebin"

# The module is its own world: a go.work or module flags of the caller must
# not leak into it.
export GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0

pebble_module=github.com/letsencrypt/pebble/v2
version="$(cd "$mod" && go list -m -f '{{.Version}}' "$pebble_module")"
if [[ ! "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
	echo "pebble: unexpected ${pebble_module} version '${version}'" >&2
	exit 1
fi

# shellcheck source=hack/lib/cached-build.sh
source "${here}/lib/cached-build.sh"
dir="$(cache_dir "pebble-${version}")"
lock_dir "$dir"

build_cached pebble "$mod" "$dir" pebble "${pebble_module}/cmd/pebble" "-s -w -X main.version=${version}"
build_cached pebble "$mod" "$dir" pebble-challtestsrv "${pebble_module}/cmd/pebble-challtestsrv" "-s -w"

"${dir}/pebble" -version >/dev/null 2>&1 || {
	echo "pebble: ${dir}/pebble does not run" >&2
	exit 1
}
"${dir}/pebble-challtestsrv" -h >/dev/null 2>&1 || [[ $? -eq 2 ]] || {
	echo "pebble: ${dir}/pebble-challtestsrv does not run" >&2
	exit 1
}

echo "$dir"

#!/usr/bin/env bash
# Builds the OpenID provider Portico's OIDC tests log in against (the
# example provider of github.com/zitadel/oidc/v3, started by
# hack/oidcproviderbin with the client the test names) from
# hack/oidcproviderbin, whose go.mod pins the module, into a cache outside
# the repository:
#
#   ${PORTICO_CACHE:-$HOME/.cache/portico}/bin/oidc-provider-<version>-<sum>/
#
# A binary that is already there is not built again. On success the last
# line on stdout is that directory; progress goes to stderr.
set -euo pipefail
# Portico needs Go 1.27; the go command fetches this toolchain itself.
export GOTOOLCHAIN=go1.27.3

trap 'echo "oidc-provider: failed (line ${LINENO})" >&2' ERR

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="${here}/oidcproviderbin"

export GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0

oidc_module=github.com/zitadel/oidc/v3
version="$(cd "$mod" && go list -m -f '{{.Version}}' "$oidc_module")"
if [[ ! "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
	echo "oidc-provider: unexpected ${oidc_module} version '${version}'" >&2
	exit 1
fi
# The starter's own code is part of what is built: a change of it is a new
# directory.
sum="$(cat "${mod}/main.go" "${mod}/go.sum" | sha256sum | cut -c1-12)"

# shellcheck source=hack/lib/cached-build.sh
source "${here}/lib/cached-build.sh"
dir="$(cache_dir "oidc-provider-${version}-${sum}")"
lock_dir "$dir"

build_cached oidc-provider "$mod" "$dir" oidc-provider . "-s -w"

echo "$dir"

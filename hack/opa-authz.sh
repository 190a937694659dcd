#!/usr/bin/env bash
# Builds the gRPC external authorization service Portico's tests ask
# (Envoy's Authorization/Check, decided by a Rego policy evaluated by OPA)
# from hack/opaauthzbin, whose go.mod pins OPA and Envoy's API module, into
# a cache outside the repository:
#
#   ${PORTICO_CACHE:-$HOME/.cache/portico}/bin/opa-authz-<opa version>/
#
# A binary that is already there is not built again. On success the last
# line on stdout is that directory; progress goes to stderr.
set -euo pipefail
# Portico needs Go 1.27; the go command fetches this toolchain itself.
export GOTOOLCHAIN=go1.27.3

trap 'echo "opa-authz: failed (line ${LINENO})" >&2' ERR

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="${here}/opaauthzbin"

export GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0

opa_module=github.com/open-policy-agent/opa
version="$(cd "$mod" && go list -m -f '{{.Version}}' "$opa_module")"
if [[ ! "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
	echo "opa-authz: unexpected ${opa_module} version '${version}'" >&2
	exit 1
fi
# The service's own code is part of what is built: a change of it is a
# new directory.
sum="$(cat "${mod}/main.go" "${mod}/go.sum" | sha256sum | cut -c1-12)"

# shellcheck source=hack/lib/cached-build.sh
source "${here}/lib/cached-build.sh"
dir="$(cache_dir "opa-authz-${version}-${sum}")"
lock_dir "$dir"

build_cached opa-authz "$mod" "$dir" opa-authz . "-s -w"

echo "$dir"

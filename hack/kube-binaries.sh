#!/usr/bin/env bash
# Builds the Kubernetes control plane that Portico's tests run against
# (kube-apiserver, kube-controller-manager, etcd) from the Go modules pinned in
# hack/kubebin/go.mod, into a cache outside the repository:
#
#   ${PORTICO_CACHE:-$HOME/.cache/portico}/bin/<version>/
#
# A binary that is already there is not built again, so a second run takes
# well under a second. On success the last line on stdout is that directory;
# progress goes to stderr.
set -euo pipefail
# Portico needs Go 1.27; the go command fetches this toolchain itself.
export GOTOOLCHAIN=go1.27.3

trap 'echo "kube-binaries: failed (line ${LINENO})" >&2' ERR

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="${here}/kubebin"

# The module is its own world: a go.work or module flags of the caller must
# not leak into it.
export GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0

gover() {
	(cd "$mod" && go list -m -f '{{.Version}}' "$1")
}
kube_version="$(gover k8s.io/kubernetes)"
etcd_version="$(gover go.etcd.io/etcd/server/v3)"
if [[ ! "$kube_version" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]]; then
	echo "kube-binaries: unexpected k8s.io/kubernetes version '${kube_version}'" >&2
	exit 1
fi
kube_major="${BASH_REMATCH[1]}"
kube_minor="${BASH_REMATCH[2]}"

# shellcheck source=hack/lib/cached-build.sh
source "${here}/lib/cached-build.sh"
dir="$(cache_dir "kube-${kube_version}_etcd-${etcd_version}")"
lock_dir "$dir"

# Without these the API server reports a placeholder version to clients.
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kube_ldflags+=" -X ${pkg}.gitVersion=${kube_version}"
	kube_ldflags+=" -X ${pkg}.gitMajor=${kube_major}"
	kube_ldflags+=" -X ${pkg}.gitMinor=${kube_minor}"
	kube_ldflags+=" -X ${pkg}.gitTreeState=clean"
done

build_cached kube-binaries "$mod" "$dir" etcd go.etcd.io/etcd/server/v3 "-s -w"
build_cached kube-binaries "$mod" "$dir" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags"
build_cached kube-binaries "$mod" "$dir" kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kube_ldflags"

for name in etcd kube-apiserver kube-controller-manager; do
	"${dir}/${name}" --version >/dev/null 2>&1 || {
		echo "kube-binaries: ${dir}/${name} does not run" >&2
		exit 1
	}
done

echo "$dir"

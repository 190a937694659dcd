#!/usr/bin/env bash
# Installs the system packages that Portico's tests need, only those that are
# missing, so it is cheap to run before every test run:
#
#   ip (iproute2)  network namespaces for test backends (kube/kubetest)
#   flock          serialises builds in hack/kube-binaries.sh
#
# Go modules are not handled here: the go command fetches them, and
# hack/kube-binaries.sh builds the Kubernetes control plane from them.
set -euo pipefail

declare -A package_of=(
	[ip]=iproute2
	[flock]=util-linux
)

missing=()
for cmd in "${!package_of[@]}"; do
	if ! command -v "$cmd" >/dev/null 2>&1; then
		missing+=("${package_of[$cmd]}")
	fi
done

if ((${#missing[@]} == 0)); then
	exit 0
fi

if ((EUID != 0)); then
	echo "install-deps: need root to install: ${missing[*]}" >&2
	exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2

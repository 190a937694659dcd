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
# Portico needs Go 1.27; the go command fetches this toolchain itself.
export GOTOOLCHAIN=go1.27.3
. "$(dirname "$0")/lib/apt-missing.sh"

apt_install_missing install-deps 0 ip=iproute2 flock=util-linux

#!/usr/bin/env bash
# Runs Portico's test suite: installs the system packages the tests need,
# builds the Kubernetes control plane they run against (cached after the
# first time, see hack/kube-binaries.sh), then vets and tests with the race
# detector. Arguments replace the default package pattern ./...
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./hack/install-deps.sh
# Built here rather than by the first test that needs it, so that a cold
# build (minutes) does not count against any test's timeout.
./hack/kube-binaries.sh >/dev/null

pkgs=("$@")
if ((${#pkgs[@]} == 0)); then
	pkgs=(./...)
fi
go vet "${pkgs[@]}"
go test -race -timeout 30m "${pkgs[@]}"

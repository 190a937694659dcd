#!/usr/bin/env bash
# Regenerates conformance/images/echo-basic/grpcechoserver/grpcecho.pb.go
# from grpcecho.proto. Only needed when the .proto changes: the generated
# file is committed, and nothing else in the build runs protoc.
set -euo pipefail
export GOTOOLCHAIN=go1.27.3

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${here}/../conformance/images/echo-basic/grpcechoserver"

command -v protoc >/dev/null || apt-get install -y protobuf-compiler >&2
bin="${PORTICO_CACHE:-$HOME/.cache/portico}/bin/protoc-gen-go"
mkdir -p "$bin"
# The generator's version is the runtime's version in conformance/go.mod.
version="$(cd "${here}/../conformance" && go list -m -f '{{.Version}}' google.golang.org/protobuf)"
GOBIN="$bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@${version}"

cd "$dir"
PATH="${bin}:${PATH}" protoc --go_out=. --go_opt=paths=source_relative grpcecho.proto

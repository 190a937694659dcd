#!/usr/bin/env bash
# Replays the attacks Portico is hardened against (slow bodies and readers,
# HTTP/2 rapid reset and control floods, CONTINUATION floods, slowloris,
# stalled ClientHellos, unknown-SNI floods, smuggling framings, oversize
# headers, the connection cap, draining WebSockets) with bounds on what
# each may cost. Every test named TestReliability... takes part.
set -euo pipefail
# Portico needs Go 1.27; the go command fetches this toolchain itself.
export GOTOOLCHAIN=go1.27.3
cd "$(dirname "$0")/.."
exec go test -race -count=1 -run Reliability "$@" ./...

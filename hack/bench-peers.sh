#!/usr/bin/env bash
# Installs the proxies that bench/sidebyside runs next to Portico, and the
# load generators of its external mode (-mode external), from Debian
# packages, only those that are missing:
#
#   nginx    /usr/sbin/nginx
#   haproxy  /usr/sbin/haproxy
#   caddy    /usr/bin/caddy
#   wrk      /usr/bin/wrk      (HTTP/1.1, plain and TLS)
#   h2load   /usr/bin/h2load   (HTTP/2; package nghttp2-client)
#
# The packages' services are not started: the harness runs each proxy itself,
# on loopback, with a configuration of its own.
set -euo pipefail
# Portico needs Go 1.27; the go command fetches this toolchain itself.
export GOTOOLCHAIN=go1.27.3
. "$(dirname "$0")/lib/apt-missing.sh"

apt_install_missing bench-peers 1 nginx=nginx haproxy=haproxy caddy=caddy wrk=wrk h2load=nghttp2-client

# nginx's stream module (ssl_preread, for the TLS passthrough comparison,
# go run ./bench/sidebyside -mode passthrough) is a package of its own and
# no command: the placeholder name below is never on PATH, so the package is
# installed whenever the module file is missing.
if [[ ! -e /usr/lib/nginx/modules/ngx_stream_module.so ]]; then
	apt_install_missing bench-peers 1 no-such-command-nginx-stream=libnginx-mod-stream
fi

#!/usr/bin/env bash
# Installs the proxies that bench/sidebyside runs next to Portico, from
# Debian packages, only those that are missing:
#
#   nginx    /usr/sbin/nginx
#   haproxy  /usr/sbin/haproxy
#   caddy    /usr/bin/caddy
#
# The packages' services are not started: the harness runs each proxy itself,
# on loopback, with a configuration of its own.
set -euo pipefail
# Portico needs Go 1.27; the go command fetches this toolchain itself.
export GOTOOLCHAIN=go1.27.3
. "$(dirname "$0")/lib/apt-missing.sh"

apt_install_missing bench-peers 1 nginx=nginx haproxy=haproxy caddy=caddy

# nginx's stream module (ssl_preread, for the TLS passthrough comparison,
# go run ./bench/sidebyside -mode passthrough) is a package of its own and
# no command: the placeholder name below is never on PATH, so the package is
# installed whenever the module file is missing.
if [[ ! -e /usr/lib/nginx/modules/ngx_stream_module.so ]]; then
	apt_install_missing bench-peers 1 no-such-command-nginx-stream=libnginx-mod-stream
fi

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

declare -A package_of=(
	[nginx]=nginx
	[haproxy]=haproxy
	[caddy]=caddy
)

missing=()
for cmd in "${!package_of[@]}"; do
	if ! command -v "$cmd" >/dev/null 2>&1 && [[ ! -x /usr/sbin/$cmd ]]; then
		missing+=("${package_of[$cmd]}")
	fi
done

if ((${#missing[@]} == 0)); then
	exit 0
fi

if ((EUID != 0)); then
	echo "bench-peers: need root to install: ${missing[*]}" >&2
	exit 1
fi
echo "bench-peers: installing ${missing[*]}" >&2

# A policy-rc.d that refuses keeps the packages from starting their services
# (nginx would take port 80); one already in place is left as it is.
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod +x "$policy"
	trap 'rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2

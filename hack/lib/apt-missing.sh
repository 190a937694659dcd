# Sourced by the hack scripts that need Debian packages.
#
# apt_install_missing LABEL KEEP_SERVICES_DOWN CMD=PACKAGE...
#   installs, with apt-get, the packages of the commands that are neither on
#   PATH nor in /usr/sbin (root's sbin is not always on PATH), and nothing
#   when all are there, so that it is cheap before every run. LABEL prefixes
#   its messages. With KEEP_SERVICES_DOWN=1, a refusing policy-rc.d keeps the
#   packages from starting their services while they install (an nginx would
#   take port 80); a policy-rc.d already in place is left as it is.

apt_install_missing() {
	local label=$1 keep_down=$2
	shift 2
	local missing=() pair cmd
	for pair in "$@"; do
		cmd=${pair%%=*}
		if ! command -v "$cmd" >/dev/null 2>&1 && [[ ! -x /usr/sbin/$cmd ]]; then
			missing+=("${pair#*=}")
		fi
	done
	if ((${#missing[@]} == 0)); then
		return 0
	fi
	if ((EUID != 0)); then
		echo "$label: need root to install: ${missing[*]}" >&2
		return 1
	fi
	echo "$label: installing ${missing[*]}" >&2

	local policy=/usr/sbin/policy-rc.d placed=0
	if ((keep_down)) && [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod +x "$policy"
		placed=1
	fi
	local rc=0
	DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
		rc=$?
	if ((placed)); then
		rm -f "$policy"
	fi
	return "$rc"
}

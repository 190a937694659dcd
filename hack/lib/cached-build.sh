# Sourced by the scripts that build tools for the tests from pinned Go
# modules (kube-binaries.sh, pebble.sh, conformance.sh) into a cache outside
# the repository: ${PORTICO_CACHE:-$HOME/.cache/portico}/bin/<name>/.

# cache_dir NAME creates the cache directory NAME and prints its path.
cache_dir() {
	local dir="${PORTICO_CACHE:-${HOME}/.cache/portico}/bin/$1"
	mkdir -p "$dir"
	echo "$dir"
}

# lock_dir DIR waits for, then holds until the calling script exits, the
# build lock of DIR (on file descriptor 9): test packages run in parallel
# and each may call the script, and building the same binaries twice at once
# would only slow both down. Not in cache_dir, whose output is captured in a
# subshell that would take the lock with it.
lock_dir() {
	exec 9>"$1/.lock"
	flock 9
}

# build_cached LABEL MODDIR OUTDIR NAME PKG LDFLAGS builds package PKG of
# the module in MODDIR as OUTDIR/NAME, unless it is already there. Progress
# goes to stderr, prefixed with LABEL.
build_cached() {
	local label="$1" mod="$2" dir="$3" name="$4" pkg="$5" ldflags="$6"
	local out="${dir}/${name}"
	if [[ -x "$out" ]]; then
		echo "${label}: ${name} is built" >&2
		return
	fi
	echo "${label}: building ${name} from ${pkg}" >&2
	local start=$SECONDS
	# Build next to the target and rename, so an interrupted build never
	# leaves a half-written binary that a later run would take as done.
	local tmp="${out}.tmp.$$"
	# shellcheck disable=SC2064 # expand now: $tmp is local
	trap "rm -f '${tmp}'" EXIT
	(cd "$mod" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$tmp" "$pkg")
	mv -f "$tmp" "$out"
	trap - EXIT
	echo "${label}: built ${name} in $((SECONDS - start))s" >&2
}

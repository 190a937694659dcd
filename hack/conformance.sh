#!/usr/bin/env bash
# Runs the upstream Gateway API conformance suite against Portico, on a real
# control plane made of processes (no container engine):
#
#   - builds what is missing: etcd, kube-apiserver and kube-controller-manager
#     (hack/kube-binaries.sh), the suite's echo-basic backend (cached in
#     ${PORTICO_CACHE:-$HOME/.cache/portico}/bin/), and Portico itself;
#   - runs conformance/ (a Go module of its own) as root: it starts the
#     control plane, a process kubelet that runs the suite's Pods in network
#     namespaces on a bridge, Portico in cluster mode, and the suite;
#   - writes the upstream ConformanceReport and a results table to
#     build/conformance/reports/ (conformance/reports/, the published ones,
#     with --update-reports), and ends with one line:
#       conformance: N passed, N failed, N skipped
#
# Exits non-zero when a test fails. Every process, namespace and the bridge
# are removed on exit, also on failure or interruption.
#
# Options:
#   --run-test NAME         run one test (by short name); no report is written
#   --channel NAME          the Gateway API release channel whose CRDs are
#                           installed: standard (default) or experimental;
#                           each writes a report of its own
#   --extra-features A,B    also run the tests of features not claimed yet;
#                           no report is written
#   --per-gateway           run with a GatewayClass whose Gateways each get a
#                           data plane of their own (PorticoParameters mode
#                           PerGateway): the process kubelet runs Portico's
#                           binary as their pods, a stand-in load balancer
#                           serves their Services; its report is
#                           <channel>-per-gateway-report.yaml
#   --keep-logs             keep the run directory (logs) after success
#   --update-reports        write the report and results table of a full run
#                           over the committed ones in conformance/reports/
#                           (by default they go to build/conformance/reports/,
#                           so that a test run leaves the tree as it was)
set -euo pipefail
# Portico needs Go 1.27; the go command fetches this toolchain itself.
export GOTOOLCHAIN=go1.27.3
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"

run_test="" extra="" keep=0 channel=standard per_gateway=false report_dir="${root}/build/conformance/reports"
while (($#)); do
	case "$1" in
	--run-test) run_test="$2"; shift 2 ;;
	--extra-features) extra="$2"; shift 2 ;;
	--channel) channel="$2"; shift 2 ;;
	--keep-logs) keep=1; shift ;;
	--per-gateway) per_gateway=true; shift ;;
	--update-reports) report_dir="${root}/conformance/reports"; shift ;;
	*) echo "conformance: unknown argument $1" >&2; exit 2 ;;
	esac
done

if ((EUID != 0)); then
	echo "conformance: must run as root (network namespaces, a bridge, ports 80/443)" >&2
	exit 1
fi

# Must match conformance/harness: what a crashed run may have left behind.
bridge=portico-conf0
netns_prefix=portico-conf-

export GOWORK=off

./hack/install-deps.sh
./hack/kube-binaries.sh >/dev/null

# shellcheck source=hack/lib/cached-build.sh
source hack/lib/cached-build.sh
# The suite's backend, from the module pinned in hack/echobin (see there why
# it is not the suite's own version).
echo_version="$(cd hack/echobin && go list -m -f '{{.Version}}' sigs.k8s.io/gateway-api/conformance)"
echo_dir="$(cache_dir "echo-basic-${echo_version}")"
lock_dir "$echo_dir"
build_cached conformance hack/echobin "$echo_dir" echo-basic sigs.k8s.io/gateway-api/conformance/echo-basic "-s -w"
exec 9>&-
echo_basic="${echo_dir}/echo-basic"

run_dir="$(mktemp -d /tmp/portico-conformance-XXXXXX)"
test_pid=""
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n "$test_pid" ]] && kill -0 "$test_pid" 2>/dev/null; then
		# The test binary's children die with it (parent-death signal).
		kill -TERM -- "-$test_pid" 2>/dev/null || true
		sleep 2
		kill -KILL -- "-$test_pid" 2>/dev/null || true
	fi
	local ns
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
		if [[ "$ns" == "${netns_prefix}"* ]]; then
			ip netns del "$ns" 2>/dev/null || true
		fi
	done
	ip link del "$bridge" 2>/dev/null || true
	if ((rc == 0 && keep == 0)); then
		rm -rf "$run_dir"
	else
		echo "conformance: logs of this run are in ${run_dir}" >&2
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

version="$(git -C "$root" describe --always --dirty 2>/dev/null || echo dev)"
go build -trimpath -o "${run_dir}/portico" ./cmd/portico

start=$SECONDS
cd conformance
go test -c -o "${run_dir}/conformance.test" .
set +e
# Its own process group, so that clean-up can end it with everything it ran.
setsid "${run_dir}/conformance.test" -test.run '^TestConformance$' -test.v -test.timeout 28m \
	-portico.binary="${run_dir}/portico" \
	-portico.echo-basic="$echo_basic" \
	-portico.run-dir="$run_dir" \
	-portico.report-dir="$report_dir" \
	-portico.version="$version" \
	-portico.run-test="$run_test" \
	-portico.extra-features="$extra" \
	-portico.channel="$channel" \
	-portico.per-gateway="$per_gateway" \
	>"${run_dir}/conformance.log" 2>&1 &
test_pid=$!
wait "$test_pid"
rc=$?
set -e
test_pid=""

# One line per test, then the failures' own output.
# (parallel tests report twice, at two indents).
grep -E '^ *--- (PASS|FAIL|SKIP): TestConformance/[^/ ]+ ' "${run_dir}/conformance.log" | sed 's/^ *//' | awk '!seen[$0]++' || true
if ((rc != 0)); then
	echo "conformance: FAILED (exit ${rc}); what failed:" >&2
	# The assertions of the failed tests; the end of the log if there are
	# none (the harness itself failed).
	if grep -qE '^ +Error:' "${run_dir}/conformance.log"; then
		awk '/^ +Error:/ {p = 1} p {print} /^ +Messages:/ {p = 0}' "${run_dir}/conformance.log" | cut -c1-400 | head -n 400 >&2
	else
		tail -n 60 "${run_dir}/conformance.log" >&2
	fi
fi
echo "conformance: took $((SECONDS - start))s (control plane, suite and clean-up)"
if [[ -s "${run_dir}/summary.txt" ]]; then
	cat "${run_dir}/summary.txt"
else
	echo "conformance: no summary: the suite did not finish" >&2
	((rc != 0)) || rc=1
fi
exit "$rc"

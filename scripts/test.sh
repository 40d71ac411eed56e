#!/usr/bin/env bash
# Runs all test tiers (unit, integration, container), one pytest run per tier, and prints each
# tier's wall time. Extra arguments go to every tier's pytest, e.g. `scripts/test.sh -m unit` or
# `scripts/test.sh --durations=15`; arguments that name test paths (`scripts/test.sh
# tests/unit/kvstore`) replace the tiers with one run over those paths.
#
# The integration tier runs on three pytest-xdist workers, a group of tests to a worker (`--dist
# loadgroup`: a module, or the modules sharing one cluster, tests/integration/conftest.py), so a
# cluster starts once in the tier: its workers wait on the clusters they start, so three keep the
# cores busier than one. The unit tier stays in one process: its
# tests are CPU-bound, and torch's threads in two workers would contend for the same two cores.
# AGENTSERVE_TEST_WORKERS sets the integration tier's workers (1: one process).
#
# Every tier runs even when an earlier one fails; the exit status is the first failing tier's. A
# tier whose tests the arguments deselect all (pytest's exit 5, "no tests collected") counts as
# passed, unless no tier ran a test at all.
#
# Works on a fresh machine: the venv is installed here, and the container tier's fixture
# (tests/support/compose.py) runs scripts/build_images.sh, which sets up Docker (setup_docker.sh)
# and builds whatever images are missing or stale. So Docker is touched only when container
# tests are selected, and images already built in this run are not built again.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/steps.sh
once install scripts/install.sh

NO_TESTS=5
runs=()
for arg in "$@"; do
    case "$arg" in
        -*) ;;
        *) if [ -e "${arg%%::*}" ]; then runs=("given paths"); fi ;;
    esac
done
if [ ${#runs[@]} -eq 0 ]; then
    runs=(tests/unit tests/integration tests/container)
fi

state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT

# tier RUN: one pytest run; its exit status and wall time go to $state for the summary.
tier() {
    local run="$1" start=$SECONDS rc=0 workers=0 paths=() key="${1//\//_}"
    if [ "$run" != "given paths" ]; then paths=("$run"); fi
    case "$run" in
        tests/integration) workers=${AGENTSERVE_TEST_WORKERS:-3} ;;
    esac
    if [ "$workers" -gt 1 ]; then
        paths+=(-n "$workers" --dist loadgroup)
    fi
    echo "==== $run ===="
    .venv/bin/python -m pytest "${paths[@]}" "${args[@]}" || rc=$?
    echo "$rc" >"$state/$key.rc"
    echo $((SECONDS - start)) >"$state/$key.s"
}

args=("$@")
if [ "${runs[*]}" = "tests/unit tests/integration tests/container" ]; then
    # The container tier runs beside the unit tier: the unit tier opens no sockets and starts no
    # processes (its fixture enforces it), and the container tier mostly waits on its containers,
    # so the two share the cores without touching each other's ports. Its output is printed when
    # it ends. The integration tier runs alone after both: its loopback clusters want both cores.
    tier tests/container >"$state/container.log" 2>&1 &
    container=$!
    tier tests/unit
    wait "$container" || true
    cat "$state/container.log"
    tier tests/integration
    beside=" (beside unit)"
else
    for run in "${runs[@]}"; do tier "$run"; done
    beside=""
fi

status=0
ran_tests=false
echo "==== test tiers ===="
for run in "${runs[@]}"; do
    key="${run//\//_}"
    rc=$(cat "$state/$key.rc")
    note=""
    if [ "$run" = tests/container ]; then note=$beside; fi
    printf '%-18s %5ds  (exit %d)%s\n' "$run" "$(cat "$state/$key.s")" "$rc" "$note"
    if [ "$rc" -eq 0 ]; then
        ran_tests=true
    elif [ "$rc" -ne "$NO_TESTS" ] && [ "$status" -eq 0 ]; then
        status=$rc
    fi
done
if [ "$status" -eq 0 ] && [ "$ran_tests" = false ]; then
    status=$NO_TESTS
fi
exit "$status"

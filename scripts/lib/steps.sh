# Shared by the setup scripts (sourced, not run): steps that say what they do and how long they
# took, scripts that run once however many callers ask for them, and pip without its noise.
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/steps.sh"
#   STEP_PREFIX=install                         # "[install] ..." on stderr
#   step "creating the virtualenv" "$PY" -m venv .venv
#   once setup_docker scripts/setup_docker.sh   # skipped if a calling script already ran it
#   quiet_pip .venv/bin/python install -q -r requirements-dev.lock
#
# `once` is why no setup step prints twice: demo.sh runs setup_docker.sh, and so does the
# build_images.sh it runs next; the names of scripts already run travel down to child scripts in
# AGENTSERVE_STEPS_DONE.

STEP_PREFIX="${STEP_PREFIX:-setup}"

step_log() { echo "[$STEP_PREFIX] $*" >&2; }

# step WHAT CMD...: say WHAT, run CMD, say how long it took (or that it failed, and its exit code).
step() {
    local what="$1" start=$SECONDS rc=0
    shift
    step_log "$what ..."
    "$@" || rc=$?
    if [ "$rc" -eq 0 ]; then
        step_log "$what: done in $((SECONDS - start))s"
    else
        step_log "$what: FAILED (exit $rc) after $((SECONDS - start))s"
    fi
    return "$rc"
}

# once NAME CMD...: run CMD unless a calling script already ran NAME; then mark NAME as run.
once() {
    local name="$1"
    shift
    case " ${AGENTSERVE_STEPS_DONE:-} " in
        *" $name "*) return 0 ;;
    esac
    "$@"
    export AGENTSERVE_STEPS_DONE="${AGENTSERVE_STEPS_DONE:-} $name"
}

# This machine's pip configuration names extra indexes that may not exist; pip then warns once per
# package and index ("WARNING: Location 'file:///...' is ignored: it is neither a file nor a
# directory."), hundreds of lines that hide everything else.
PIP_NOISE="^WARNING: Location '[^']*' is ignored: it is neither a file nor a directory\.$"

# quiet_pip PYTHON ARGS...: `PYTHON -m pip ARGS` with its output in a log. Shows pip's warnings and
# errors but the index noise, and on failure the last 40 lines of the log.
quiet_pip() {
    local python="$1" log rc=0
    shift
    log="$(mktemp "${TMPDIR:-/tmp}/agentserve-pip.XXXXXX.log")"
    "$python" -m pip "$@" >"$log" 2>&1 || rc=$?
    grep -Ev "$PIP_NOISE" "$log" | grep -E '^(WARNING|ERROR)' >&2 || true
    if [ "$rc" -ne 0 ]; then
        step_log "pip $1 failed (exit $rc); its last lines (full log: $log):"
        grep -Ev "$PIP_NOISE" "$log" | tail -n 40 >&2
        return "$rc"
    fi
    rm -f "$log"
}

# quiet_apt PACKAGE...: apt-get update and install as root, output in a log (debconf and
# needrestart chatter otherwise), the log's tail shown on failure.
quiet_apt() {
    local log rc=0 sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    log="$(mktemp "${TMPDIR:-/tmp}/agentserve-apt.XXXXXX.log")"
    {
        "${sudo[@]}" apt-get update -qq \
            && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "$@"
    } >"$log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then
        step_log "apt-get install $* failed (exit $rc); its last lines (full log: $log):"
        tail -n 40 "$log" >&2
        return "$rc"
    fi
    rm -f "$log"
}

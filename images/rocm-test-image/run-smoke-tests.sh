#!/bin/sh
# The entrypoint of rocm-test-image: run the smoke tests in $SMOKE_DIR
# (default /opt/smoke) and exit with their status.
#   no arguments      every test_*.sh (with sh) and test_*.py (with python3),
#                     in name order
#   NAME...           those tests (files in $SMOKE_DIR, or paths), any kind:
#                     .sh with sh, .py with python3, others executed
#   any other command (`bash`) runs instead of the tests
# Each test runs from a fresh empty directory; SMOKE_TIMEOUT=SECONDS limits
# each one. Exit status: 0 when every test passed, 1 when one failed, 2 when
# there was nothing to run.
set -u
dir="${SMOKE_DIR:-/opt/smoke}"

if [ $# -gt 0 ]; then
    case "$1" in
        test_*) ;;
        *) if [ ! -f "$dir/$1" ] && [ ! -f "$1" ]; then exec "$@"; fi ;;
    esac
fi

if [ $# -eq 0 ]; then
    for t in "$dir"/test_*.sh "$dir"/test_*.py; do
        [ -f "$t" ] && set -- "$@" "$t"
    done
    if [ $# -eq 0 ]; then
        echo "run-smoke-tests: no test_*.sh or test_*.py in $dir" >&2
        exit 2
    fi
    # Name order across both kinds.
    sorted=$(for t in "$@"; do echo "$t"; done | LC_ALL=C sort)
    set --
    set -f
    old_ifs=$IFS
    IFS='
'
    for t in $sorted; do set -- "$@" "$t"; done
    IFS=$old_ifs
    set +f
fi

passed=0
failed=""
for t in "$@"; do
    case "$t" in
        */*) path="$t" ;;
        *) path="$dir/$t" ;;
    esac
    name=$(basename "$path")
    echo "=== $name"
    if [ ! -f "$path" ]; then
        echo "--- FAIL $name (no such test: $path)"
        failed="$failed $name"
        continue
    fi
    case "$path" in
        *.sh) runner="sh" ;;
        *.py) runner="python3" ;;
        *) runner="" ;;
    esac
    work=$(mktemp -d)
    (
        cd "$work" || exit 125
        if [ -n "${SMOKE_TIMEOUT:-}" ]; then
            exec timeout "$SMOKE_TIMEOUT" $runner "$path"
        fi
        exec $runner "$path"
    )
    code=$?
    rm -rf "$work"
    if [ "$code" -eq 0 ]; then
        echo "--- PASS $name"
        passed=$((passed + 1))
    else
        echo "--- FAIL $name (exit $code)"
        failed="$failed $name"
    fi
done

if [ -z "$failed" ]; then
    echo "smoke tests: $passed passed"
    exit 0
fi
count=$(echo $failed | wc -w)
echo "smoke tests: $passed passed, $count failed:$failed"
exit 1

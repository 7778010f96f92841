#!/bin/sh
# `quarry wheel build` against the plain tools in the same image, same run.
#
# 1. Isolated builds (the default), for two sdists of the corpus of
#    tests/e2e/wheel_corpus.rs (ujson 6.1.0, xxhash 4.1.0) in its Debian 12 build
#    image (python3, python3-venv, gcc/g++, -dev libraries; no pip, no
#    setuptools). Plain = what cibuildwheel does on Linux: `docker create`
#    (network on) of the image, `docker cp` of the sdist, `python3 -m venv`
#    + `pip wheel` (pip's own build isolation, requirements from the index),
#    `docker cp` of the wheel out, `docker rm`. quarry cold = an empty cache
#    and no lock (resolves and downloads the requirements with the host's
#    pip); quarry warm = the lock and a warm cache, network off.
# 2. --no-build-isolation, msgpack in the build image of tests/e2e/wheel_build.rs
#    (run that test once first), against `pip wheel --no-build-isolation`.
#
# The host's pip configuration (PIP_INDEX_URL, PIP_CERT) is passed to the
# plain containers so that both fetch from the same index.
# usage: benches/wheel_build.sh [RUNS]   (build first: cargo build --release)
set -eu
runs=${1:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
quarry=${QUARRY:-$repo/target/release/quarry}
[ -x "$quarry" ] || { echo "build first: cargo build --release (or set QUARRY)" >&2; exit 1; }
fixtures=${QUARRY_TEST_CACHE:-$HOME/.cache/quarry-tests}/fixtures
corpus=$fixtures/wheelcorpus
corpus_dir=$corpus/corpus-$(sha256sum "$repo/tests/fixtures/wheel-corpus.sh" | cut -c1-12)
sh "$repo/tests/fixtures/wheel-corpus.sh" "$corpus_dir"
out=$(mktemp -d)
tags=""
cleanup() {
    rm -rf "$out"
    for t in $tags; do docker image rm "$t" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

# Seconds (wall clock) per run of a command, over RUNS runs.
per_run() {
    start=$(date +%s.%N)
    i=0
    while [ $i -lt "$runs" ]; do "$@"; i=$((i + 1)); done
    end=$(date +%s.%N)
    echo "$start $end $runs" | awk '{ printf "%.2f", ($2 - $1) / $3 }'
}
ratio() { echo "$1 $2" | awk '{ printf "%.2f", $1 / $2 }'; }

# The corpus build image (built once by quarry, like the test does).
layout=$(ls -d "$corpus"/build-image-* 2>/dev/null | head -1 || true)
if [ -z "$layout" ] || [ ! -f "$layout/index.json" ]; then
    layout=$corpus/build-image-bench
    "$quarry" build "$repo/tests/wheel_corpus/build-image.toml" -o "$layout" --cache-dir "$corpus/cache" --quiet
fi
tag=quarry-bench-wheelcorpus-$$:1
tags="$tags $tag"
"$quarry" load "$layout" --tag "$tag" >/dev/null

# The host pip's index and certificates, for pip in the plain containers.
pipenv=""
[ -n "${PIP_INDEX_URL:-}" ] && pipenv="$pipenv -e PIP_INDEX_URL=$PIP_INDEX_URL"
if [ -n "${PIP_CERT:-}" ]; then
    mkdir -p "$out/ca" && cp "$PIP_CERT" "$out/ca/ca.pem"
    pipenv="$pipenv -e PIP_CERT=/quarry-ca/ca.pem"
fi

plain_isolated() {
    # shellcheck disable=SC2086
    id=$(docker create --label quarry-bench=wheelbuild $pipenv "$tag" sh -c \
        "python3 -m venv /v && /v/bin/pip wheel -q --disable-pip-version-check --no-deps -w /out /sdist/$name")
    docker cp "$out/sd" "$id:/sdist"
    [ -d "$out/ca" ] && docker cp "$out/ca" "$id:/quarry-ca"
    docker start --attach "$id" >/dev/null 2>&1
    rm -rf "$out/plain" && docker cp "$id:/out" "$out/plain"
    docker rm -f "$id" >/dev/null
}
quarry_cold() {
    rm -rf "$out/quarry" "$out/cold-cache"
    "$quarry" wheel build "$sdist" --image "$tag" --output "$out/quarry" --gpu none \
        --cache-dir "$out/cold-cache" >/dev/null 2>&1
}
quarry_warm() {
    rm -rf "$out/quarry"
    "$quarry" wheel build "$sdist" --image "$tag" --output "$out/quarry" --gpu none \
        --cache-dir "$out/warm-cache" --lock "$out/warm.lock" --no-cache >/dev/null 2>&1
}

for sdist in "$corpus_dir"/sdists/ujson-*.tar.gz "$corpus_dir"/sdists/xxhash-*.tar.gz; do
    name=$(basename "$sdist")
    rm -rf "$out/sd" "$out/warm.lock" && mkdir -p "$out/sd" && cp "$sdist" "$out/sd/"
    quarry_warm # fills the warm cache and writes the lock
    p=$(per_run plain_isolated)
    c=$(per_run quarry_cold)
    w=$(per_run quarry_warm)
    ls "$out"/plain/*.whl "$out"/quarry/*.whl >/dev/null
    printf '%s, isolated builds, %s runs each (seconds per run)\n' "$name" "$runs"
    printf '  plain docker + venv + pip wheel (network) : %7s\n' "$p"
    printf '  quarry wheel build, cold cache, no lock   : %7s  (ratio %s)\n' "$c" "$(ratio "$c" "$p")"
    printf '  quarry wheel build, lock + warm, offline  : %7s  (ratio %s)\n' "$w" "$(ratio "$w" "$p")"
done

# 2. --no-build-isolation (msgpack, the build image of tests/e2e/wheel_build.rs).
old=$(ls -d "$fixtures"/wheelbuild/quarry-test-wheelbuild-* 2>/dev/null | head -1 || true)
if [ -z "$old" ] || [ ! -f "$old/index.json" ]; then
    echo "(no --no-build-isolation row: run cargo test --test e2e wheel_build:: once for its build image)"
    exit 0
fi
wheels=$fixtures/wheels-$(sha256sum "$repo/tests/fixtures/wheel-fixtures.sh" | cut -c1-12)
sh "$repo/tests/fixtures/wheel-fixtures.sh" "$wheels"
sdist=$(ls "$wheels"/sdists/msgpack-*.tar.gz)
name=$(basename "$sdist")
tag=quarry-bench-wheelbuild-$$:1
tags="$tags $tag"
"$quarry" load "$old" --tag "$tag" >/dev/null
rm -rf "$out/sd" && mkdir -p "$out/sd" && cp "$sdist" "$out/sd/"
plain_no_isolation() {
    id=$(docker create --network none --label quarry-bench=wheelbuild "$tag" \
        python3 -m pip wheel -q --no-deps --no-build-isolation --no-index -w /out "/sdist/$name")
    docker cp "$out/sd" "$id:/sdist"
    docker start --attach "$id" >/dev/null
    rm -rf "$out/plain" && docker cp "$id:/out" "$out/plain"
    docker rm -f "$id" >/dev/null
}
quarry_no_isolation() {
    rm -rf "$out/quarry"
    "$quarry" wheel build "$sdist" --image "$tag" --output "$out/quarry" --gpu none --no-build-isolation --no-cache >/dev/null 2>&1
}
plain_no_isolation # warm-up (page cache, image layers)
p=$(per_run plain_no_isolation)
q=$(per_run quarry_no_isolation)
ls "$out"/plain/*.whl "$out"/quarry/*.whl >/dev/null
printf '%s, --no-build-isolation, %s runs each (seconds per run)\n' "$name" "$runs"
printf '  plain docker + pip wheel --no-build-isolation : %6s\n' "$p"
printf '  quarry wheel build --no-build-isolation       : %6s  (ratio %s)\n' "$q" "$(ratio "$q" "$p")"

#!/bin/sh
# The overhead of `quarry wheel build` over a plain `pip wheel` in the same
# image, for the msgpack sdist of the wheel tests. Plain = `docker create`
# of the image, `docker cp` of the sdist, `pip wheel` run by `docker start
# --attach`, `docker cp` of the wheel out, `docker rm`. Both with the network
# off. Uses the build image of tests/wheel_build.rs (run that test once
# first: it caches the layout under target/fixtures/wheelbuild).
# usage: benches/wheel_build.sh [RUNS]   (build first: cargo build --release)
set -eu
runs=${1:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
fx=$repo/target/fixtures/wheels
sh "$repo/tests/fixtures/wheel-fixtures.sh" "$fx"
layout=$repo/target/fixtures/wheelbuild/quarry-test-wheelbuild-image
[ -f "$layout/index.json" ] || { echo "no build image: run cargo test --test wheel_build first" >&2; exit 1; }
quarry=${QUARRY:-$repo/target/release/quarry}
[ -x "$quarry" ] || { echo "build first: cargo build --release (or set QUARRY)" >&2; exit 1; }
sdist=$(ls "$fx"/sdists/msgpack-*.tar.gz)
name=$(basename "$sdist")
tag=quarry-bench-wheelbuild-$$:1
out=$(mktemp -d)
cleanup() {
    rm -rf "$out"
    docker image rm "$tag" >/dev/null 2>&1 || true
}
trap cleanup EXIT
"$quarry" load "$layout" --tag "$tag" >/dev/null
# docker cp needs the container's parent directory to exist: copy a directory.
mkdir -p "$out/sd" && cp "$sdist" "$out/sd/"

plain() {
    id=$(docker create --network none --label quarry-bench=wheelbuild "$tag" \
        python3 -m pip wheel -q --no-deps --no-build-isolation --no-index -w /out "/sdist/$name")
    docker cp "$out/sd" "$id:/sdist"
    docker start --attach "$id" >/dev/null
    rm -rf "$out/plain" && docker cp "$id:/out" "$out/plain"
    docker rm -f "$id" >/dev/null
}
ours() {
    rm -rf "$out/quarry"
    "$quarry" wheel build "$sdist" --image "$tag" --output "$out/quarry" --gpu none >/dev/null 2>&1
}

# Seconds (wall clock) per run of a function, over RUNS runs.
per_run() {
    start=$(date +%s.%N)
    i=0
    while [ $i -lt "$runs" ]; do "$1"; i=$((i + 1)); done
    end=$(date +%s.%N)
    echo "$start $end $runs" | awk '{ printf "%.2f", ($2 - $1) / $3 }'
}

plain # warm-up (page cache, image layers)
p=$(per_run plain)
q=$(per_run ours)
ls "$out"/plain/*.whl "$out"/quarry/*.whl >/dev/null
printf 'msgpack (%s), %s runs each\n' "$name" "$runs"
printf '  plain docker + pip wheel : %6ss\n' "$p"
printf '  quarry wheel build       : %6ss\n' "$q"
echo "$q $p" | awk '{ printf "  ratio quarry/plain      : %6.2f\n", $1 / $2 }'

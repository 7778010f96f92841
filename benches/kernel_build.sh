#!/bin/sh
# `quarry kernel build` against the plain docker flow, same image, same run.
#
# Input: tests/fixtures/hip/lib (two HIP kernels, `make` calling hipcc) for
# gfx90a, gfx942 and gfx1100 in the shipped hip-builder-debian13 image (the
# layout tests/e2e/kernel_build.rs builds in the test fixtures; run that test
# once first). The image is loaded into the engine before the first row.
# Plain = `docker create --network none` of the image, `docker cp` of the
# source in, `docker start -a` of `make` with PYTORCH_ROCM_ARCH and
# HIPCC_COMPILE_FLAGS_APPEND set by hand, `docker cp` of build/ out, `docker
# rm`. quarry cold = an empty kernel cache (and `code-objects` check);
# quarry cached = the same build again.
# usage: benches/kernel_build.sh [RUNS]   (QUARRY=target/debug/quarry to use a debug build)
set -eu
runs=${1:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
quarry=${QUARRY:-$repo/target/release/quarry}
[ -x "$quarry" ] || { echo "build first: cargo build --release (or set QUARRY)" >&2; exit 1; }
# Named as tests/e2e/common/mod.rs names it: by the Debian 13 definitions and locks.
defs=$(cd "$repo/images" && cat rocm-runtime-debian13.toml rocm-runtime-debian13.lock hip-builder-debian13.toml hip-builder-debian13.lock | sha256sum | cut -c1-12)
layout=${QUARRY_TEST_CACHE:-$HOME/.cache/quarry-tests}/fixtures/rocm-debian13/hip-builder-debian13-$defs
[ -f "$layout/index.json" ] || { echo "run cargo test --test e2e kernel_build:: first (it builds $layout)" >&2; exit 1; }
src=$repo/tests/fixtures/hip/lib
out=$(mktemp -d)
tag=quarry-bench-hip-builder-$$:1
cleanup() { rm -rf "$out"; docker image rm "$tag" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$quarry" load "$layout" --tag "$tag" >/dev/null
# Loaded as quarry names it too, so quarry's first row does not pay the load.
"$quarry" kernel build "$src" --image "$layout" -o "$out/warmup" --cache-dir "$out/warm-cache" \
    --targets gfx90a --gpu none -- true >/dev/null 2>&1 || true

now() { date +%s.%N; }
elapsed() { echo "$1 $(now)" | awk '{ printf "%.2f", $2 - $1 }'; }

plain() {
    id=$(docker create --network none -w /src \
        -e "PYTORCH_ROCM_ARCH=gfx90a;gfx942;gfx1100" \
        -e "HIPCC_COMPILE_FLAGS_APPEND=--offload-arch=gfx90a --offload-arch=gfx942 --offload-arch=gfx1100" \
        "$tag" make)
    docker cp "$src/." "$id:/src" >/dev/null
    docker start -a "$id" >/dev/null
    rm -rf "$out/plain" && docker cp "$id:/src/build" "$out/plain" >/dev/null
    docker rm "$id" >/dev/null
}
kbuild() {
    "$quarry" kernel build "$src" --image "$layout" -o "$out/q" --cache-dir "$1" \
        --targets gfx90a,gfx942,gfx1100 --gpu none -- make >/dev/null 2>&1
}

i=0
while [ $i -lt "$runs" ]; do
    t=$(now); plain; p=$(elapsed "$t")
    t=$(now); kbuild "$out/cache-$i"; c=$(elapsed "$t")
    t=$(now); kbuild "$out/cache-$i"; w=$(elapsed "$t")
    echo "round $i: plain docker $p s, quarry cold $c s ($(echo "$p $c" | awk '{ printf "%.2f", $1 / $2 }')x), quarry cached $w s"
    i=$((i + 1))
done

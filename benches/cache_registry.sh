#!/bin/sh
# The shared cache (issue 23), machine A against machine B, in one run.
#
# A registry: Debian's docker-registry on a free 127.0.0.1 port, fresh
# storage. Two cache directories stand for two machines.
#   1. images/no_rocm_image_debian12.toml: A builds it cold (empty local
#      cache, empty registry: .debs downloaded from the archive, packed,
#      pushed); B builds it with an empty local cache from the warm registry.
#   2. tests/fixtures/hip-multi (four HIP kernels, make + hipcc) for
#      gfx90a,gfx942,gfx1100 in hip-builder-debian13: plain docker (create,
#      cp in, make, cp out: what a rebuild costs without a cache), A cold,
#      B from the registry, and A after one of the four kernels is edited
#      (ccache compiles that one, three hits).
# Wall seconds and quarry's own CPU seconds (/usr/bin/time; a container's
# compiles are the engine's children, not quarry's: kernel rows are wall).
# usage: benches/cache_registry.sh   (cargo build --release first; the
# hip-builder layout comes from `cargo test --test kernel_build`, see benches/kernel_build.sh)
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
quarry=${QUARRY:-$repo/target/release/quarry}
[ -x "$quarry" ] || { echo "build first: cargo build --release (or set QUARRY)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
# Named as tests/common/mod.rs names it: by the Debian 13 definitions and locks.
defs=$(cd "$repo/images" && cat rocm-runtime-debian13.toml rocm-runtime-debian13.lock hip-builder-debian13.toml hip-builder-debian13.lock | sha256sum | cut -c1-12)
layout=${QUARRY_TEST_CACHE:-$HOME/.cache/quarry-tests}/fixtures/rocm-debian13/hip-builder-debian13-$defs
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$work/registry.yml" <<EOF
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $work/registry
http:
  addr: 127.0.0.1:$port
  secret: bench
EOF
/usr/bin/docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
registry_pid=$!
tag=quarry-bench-cache-builder-$$:1
cleanup() {
    kill "$registry_pid" 2>/dev/null || true
    docker image rm "$tag" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
sleep 1
tier=127.0.0.1:$port/quarry-cache

# Runs a command; prints "wall cpu" (seconds).
timed() {
    /usr/bin/time -f "%e %U %S" -o "$work/time" "$@" >"$work/out" 2>"$work/err" || {
        cat "$work/err" >&2
        exit 1
    }
    awk '{ printf "%.2f %.2f", $1, $2 + $3 }' "$work/time"
}
ratio() { echo "$1 $2" | awk '{ printf "%.1fx", $1 / $2 }'; }
row() { printf '| %s | %s | %s | %s |\n' "$1" "$2" "$3" "$4"; }

echo "| run | wall s | quarry CPU s | vs A cold |"
echo "|---|---|---|---|"
img=$repo/images/no_rocm_image_debian12.toml
set -- $(timed "$quarry" build "$img" -o "$work/out-a" --cache-dir "$work/cache-a" --cache-registry "$tier" --quiet)
a_wall=$1
row "no_rocm_image_debian12, A cold (archive, pack, push)" "$1" "$2" ""
set -- $(timed "$quarry" build "$img" -o "$work/out-b" --cache-dir "$work/cache-b" --cache-registry "$tier" --json)
row "no_rocm_image_debian12, B from the registry" "$1" "$2" "**$(ratio "$a_wall" "$1") faster**"
b_digest=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["manifest_digest"], sum(1 for l in d["layers"] if not l["cached"]))' "$work/out")
a_digest=$("$quarry" inspect "$work/out-a" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["manifest_digest"])')
echo "(A manifest $a_digest; B manifest and layers packed: $b_digest)"

if [ ! -f "$layout/index.json" ]; then
    echo "(no kernel rows: run cargo test --test kernel_build once for $layout)"
    exit 0
fi
"$quarry" load "$layout" --tag "$tag" >/dev/null
src=$work/src
cp -r "$repo/tests/fixtures/hip-multi" "$src"
targets=gfx90a,gfx942,gfx1100
kbuild() {
    timed "$quarry" kernel build "$src" --image "$layout" -o "$work/k-$1" --cache-dir "$work/kcache-$2" \
        --cache-registry "$tier" --targets "$targets" --gpu none --json -- make
}
plain() {
    id=$(docker create --network none -w /src -e "HIP_OFFLOAD_ARCH=gfx90a;gfx942;gfx1100" "$tag" make)
    docker cp "$src/." "$id:/src" >/dev/null
    docker start -a "$id" >/dev/null 2>&1
    docker cp "$id:/src/build" "$work/plain" >/dev/null
    docker rm "$id" >/dev/null
}
# The engine has the image under quarry's name too before the first timed row.
"$quarry" kernel build "$src" --image "$layout" -o "$work/warm" --cache-dir "$work/kcache-warm" \
    --targets gfx90a --gpu none -- true >/dev/null 2>&1 || true
t0=$(date +%s.%N); plain; p_wall=$(echo "$t0 $(date +%s.%N)" | awk '{ printf "%.2f", $2 - $1 }')
row "hip-multi, plain docker (4 kernels, no cache)" "$p_wall" "" ""
set -- $(kbuild a1 a)
k_cold=$1
row "hip-multi, A cold (4 compiles, ccache filled)" "$1" "$2" "$(ratio "$p_wall" "$1") of plain"
set -- $(kbuild b b)
row "hip-multi, B from the registry (0 compiles)" "$1" "$2" "**$(ratio "$k_cold" "$1") faster**"
sed -i 's/\* 3.0f/* 3.5f/' "$src/k3.hip"
set -- $(kbuild a2 a)
stats=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["compiler_cache"]; print(c["misses"], "compiled,", c["hits"], "hits")' "$work/out")
row "hip-multi, A after editing k3.hip ($stats)" "$1" "$2" "**$(echo "$1 $k_cold" | awk '{ printf "%.2fx", $1 / $2 }') of A cold**"

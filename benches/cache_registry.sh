#!/bin/sh
# The shared cache (--cache-registry), machine A against machine B, in one run.
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
# Wall seconds and quarry's own CPU seconds (/usr/bin/time). A container's
# compiles are the engine's children, not quarry's: kernel rows add the
# build container's CPU seconds (`container_cpu_seconds` in the report),
# the compile work, which a busy shared machine does not inflate.
# usage: [ONLY=kernels|images] [VARIANTS=40] benches/cache_registry.sh   (cargo build --release first; the
# hip-builder layout comes from `cargo test --test e2e kernel_build::`, see benches/kernel_build.sh)
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
quarry=${QUARRY:-$repo/target/release/quarry}
[ -x "$quarry" ] || { echo "build first: cargo build --release (or set QUARRY)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
# Named as tests/e2e/common/mod.rs names it: by the Debian 13 definitions and locks.
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
if [ "${ONLY:-}" != kernels ]; then
    img=$repo/images/no_rocm_image_debian12.toml
    set -- $(timed "$quarry" build "$img" -o "$work/out-a" --cache-dir "$work/cache-a" --cache-registry "$tier" --quiet)
    a_wall=$1
    row "no_rocm_image_debian12, A cold (archive, pack, push)" "$1" "$2" ""
    set -- $(timed "$quarry" build "$img" -o "$work/out-b" --cache-dir "$work/cache-b" --cache-registry "$tier" --json)
    row "no_rocm_image_debian12, B from the registry" "$1" "$2" "**$(ratio "$a_wall" "$1") faster**"
    b_digest=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["manifest_digest"], sum(1 for l in d["layers"] if not l["cached"]))' "$work/out")
    a_digest=$("$quarry" inspect "$work/out-a" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["manifest_digest"])')
    echo "(A manifest $a_digest; B manifest and layers packed: $b_digest)"
    # The floor: the same image from the same registry by skopeo, which
    # checks each blob's digest as it streams and decompresses nothing. B
    # does the same (see cache/remote/entry.rs), so it should be near it.
    "$quarry" push "$work/out-a" "127.0.0.1:$port/main:1" --plain-http >/dev/null
    for round in 1 2 3; do
        rm -rf "$work/skopeo" "$work/cache-b" "$work/out-b"
        set -- $(timed skopeo copy -q --src-tls-verify=false "docker://127.0.0.1:$port/main:1" "oci:$work/skopeo:main")
        s_wall=$1 s_cpu=$2
        set -- $(timed "$quarry" build "$img" -o "$work/out-b" --cache-dir "$work/cache-b" --cache-registry "$tier" --quiet)
        row "round $round: skopeo copy of A's image / B from the registry" "$s_wall / $1" "$s_cpu / $2" "B $(ratio "$1" "$s_wall") skopeo's wall"
    done

fi
[ "${ONLY:-}" = images ] && exit 0

if [ ! -f "$layout/index.json" ]; then
    echo "(no kernel rows: run cargo test --test e2e kernel_build:: once for $layout)"
    exit 0
fi
"$quarry" load "$layout" --tag "$tag" >/dev/null
# The kernel project: tests/fixtures/hip-multi's Makefile (four files, one
# object each, linked into one library) with heavier sources: each file a
# templated kernel, fully unrolled, instantiated VARIANTS times (40: about
# 17 CPU seconds a file for three targets here), the shape of
# composable-kernel's generated sources. The test fixture's own kernels
# compile in about 3 CPU seconds, mostly hipcc parsing the HIP headers four
# times (host and three targets), which every file pays, cached or not.
variants=${VARIANTS:-40}
src=$work/src
mkdir -p "$src"
cp "$repo/tests/fixtures/hip-multi/Makefile" "$src/"
for k in 1 2 3 4; do
    {
        echo "// Kernel file $k of four: one templated kernel, $variants instantiations."
        echo "#include <hip/hip_runtime.h>"
        echo "template <int TILE, int R> __global__ void blur$k(const float* __restrict__ in, float* __restrict__ out, int n) {"
        echo "    __shared__ float tile[TILE + 2 * R];"
        echo "    int i = blockIdx.x * TILE + threadIdx.x;"
        echo "    tile[threadIdx.x + R] = i < n ? in[i] : 0.0f;"
        echo "    if (threadIdx.x < R) { tile[threadIdx.x] = i >= R ? in[i - R] : 0.0f; tile[threadIdx.x + TILE + R] = i + TILE < n ? in[i + TILE] : 0.0f; }"
        echo "    __syncthreads();"
        echo "    float acc = 0.0f;"
        echo "#pragma unroll"
        echo "    for (int u = -R; u <= R; ++u) {"
        echo "        float v = tile[threadIdx.x + R + u];"
        echo "#pragma unroll"
        echo "        for (int s = 0; s < 32; ++s) acc = fmaf(acc, __sinf(v + s), __expf(v * s) * $k.0f);"
        echo "    }"
        echo "    if (i < n) out[i] = acc;"
        echo "}"
        v=0
        for t in 64 128 256 512 1024; do
            for r in $(seq 1 16); do
                [ "$v" -lt "$variants" ] || break
                echo "template __global__ void blur$k<$t, $r>(const float* __restrict__, float* __restrict__, int);"
                v=$((v + 1))
            done
        done
    } >"$src/k$k.hip"
done
targets=gfx90a,gfx942,gfx1100
# kbuild NAME CACHE [ARGS]: one kernel build with its own cache directory.
kbuild() {
    name=$1 cache=$2
    shift 2
    timed "$quarry" kernel build "$src" --image "$layout" -o "$work/k-$name" --cache-dir "$work/kcache-$cache" \
        --targets "$targets" --gpu none --json "$@" -- make
}
ccpu() { python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1])).get("container_cpu_seconds", 0))' "$work/out"; }
krow() { printf '| %s | %s | %s | %s | %s |\n' "$1" "$2" "$3" "$4" "$5"; }
stats() { python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["compiler_cache"]; print(c["misses"], "compiled,", c["hits"], "hits")' "$work/out"; }
of() { echo "$1 $2" | awk '{ printf "%.2fx", $1 / $2 }'; }
plain() {
    id=$(docker create --network none -w /src -e "HIP_OFFLOAD_ARCH=gfx90a;gfx942;gfx1100" -e MAKEFLAGS=-j2 "$tag" make)
    docker cp "$src/." "$id:/src" >/dev/null
    docker start -a "$id" >/dev/null 2>&1
    docker cp "$id:/src/build" "$work/plain" >/dev/null
    docker rm "$id" >/dev/null
}
# The engine has the image under quarry's name too before the first timed row.
"$quarry" kernel build "$src" --image "$layout" -o "$work/warm" --cache-dir "$work/kcache-warm" \
    --targets gfx90a --gpu none -- true >/dev/null 2>&1 || true
echo
echo "| kernel build | wall s | quarry CPU s | container CPU s | ratio |"
echo "|---|---|---|---|---|"
t0=$(date +%s.%N); plain; p_wall=$(echo "$t0 $(date +%s.%N)" | awk '{ printf "%.2f", $2 - $1 }')
krow "4 kernel files, plain docker (make -j2, no cache)" "$p_wall" "" "" ""
set -- $(kbuild a1 a --cache-registry "$tier")
k_cold=$1 k_cold_cpu=$(ccpu)
krow "4 kernel files, A cold (make -j2; 4 compiles, ccache filled)" "$1" "$2" "$k_cold_cpu" "$(of "$1" "$p_wall") of plain (wall)"
set -- $(kbuild b b --cache-registry "$tier")
krow "4 kernel files, B from the registry (0 compiles)" "$1" "$2" "" "**$(ratio "$k_cold" "$1") faster** (wall)"
# One file of four edited. With make -j2 on two cores the cold build
# compiles the four in two rounds and the rebuild in one: 0.5x at best.
# With --jobs 1 (the compile work, one file against four) the floor is 0.25x.
sed -i 's/\* 3.0f/* 3.5f/' "$src/k3.hip"
set -- $(kbuild a2 a --cache-registry "$tier")
cpu=$(ccpu)
krow "4 kernel files, A after editing k3.hip, make -j2 ($(stats))" "$1" "$2" "$cpu" "$(of "$1" "$k_cold") wall, **$(of "$cpu" "$k_cold_cpu") container CPU** of A cold"
# The --jobs 1 pair has a cache directory of its own and no registry.
sed -i 's/\* 3.5f/* 3.0f/' "$src/k3.hip"
set -- $(kbuild j1-cold j1 --jobs 1)
j1_cold=$1 j1_cold_cpu=$(ccpu)
krow "4 kernel files, cold, --jobs 1 ($(stats))" "$1" "$2" "$j1_cold_cpu" ""
sed -i 's/\* 3.0f/* 3.5f/' "$src/k3.hip"
set -- $(kbuild j1-edit j1 --jobs 1)
cpu=$(ccpu)
krow "4 kernel files, after editing k3.hip, --jobs 1 ($(stats))" "$1" "$2" "$cpu" "**$(of "$1" "$j1_cold") wall**, $(of "$cpu" "$j1_cold_cpu") container CPU of cold"

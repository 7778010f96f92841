#!/bin/sh
# Benchmark: a cold build of images/no_rocm_image_debian12.toml with quarry
# against mmdebstrap installing the same package list (its `required`
# variant: Essential + Priority required, like quarry's default), in the same
# run and from the same mirror (this machine's apt sources for the suite);
# both run the packages' maintainer scripts. Reports wall and CPU seconds
# (user + system, the programs they run included) and quarry's ratios; then
# quarry's warm rebuilds. Needs root (mmdebstrap --mode=root) and network.
# usage: benches/distro.sh [WORKDIR]   (default: a fresh directory under /tmp)
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d /tmp/quarry-bench-distro.XXXXXX)}
mkdir -p "$work"
image="$repo/images/no_rocm_image_debian12.toml"

cargo build --release --quiet --manifest-path "$repo/Cargo.toml"
quarry="$repo/target/release/quarry"

# The package list, read from the definition itself.
include=$(python3 - "$image" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print(",".join(tomllib.load(f)["base"]["packages"]["include"]))
PY
)

# The same archive for both: the mirror quarry takes for the suite, the suite alone.
mirror=$("$quarry" lock --dry-run --json "$image" | python3 -c 'import json,sys; r=json.load(sys.stdin)["release"]; print(r[:r.index("/dists/")])')
sources="$work/sources"
echo "deb $mirror bookworm main" > "$sources"

t() { # t LABEL COMMAND...: wall and CPU seconds of one run (in $work/LABEL.time)
    label=$1; shift
    /usr/bin/time -f '%e %U %S' -o "$work/$label.time" "$@" > "$work/$label.log" 2>&1 || { cat "$work/$label.log" >&2; exit 1; }
    read -r wall user sys < "$work/$label.time"
    printf '%-44s %8.1f s wall %8.1f s CPU\n' "$label" "$wall" "$(echo "$user + $sys" | bc)"
}
secs() { read -r wall user sys < "$work/$1.time"; [ "$2" = wall ] && echo "$wall" || echo "$user + $sys" | bc; }

cp "$image" "$work/no_rocm_image_debian12.toml"
img="$work/no_rocm_image_debian12.toml"
rm -rf "$work/cache" "$work/out" "$work/mmdebstrap.tar" "$work/no_rocm_image_debian12.lock"

echo "cores: $(nproc); packages: $include"
t "quarry cold (resolve, download, build)" "$quarry" build "$img" --cache-dir "$work/cache" -o "$work/out"
t "mmdebstrap cold (--variant=required)" mmdebstrap --variant=required --mode=root --format=tar \
    --aptopt='Acquire::Check-Valid-Until "false"' --include="$include" bookworm "$work/mmdebstrap.tar" "$sources"
# mmdebstrap writes an uncompressed tar; the main job gzips its layer (a
# third of quarry's CPU). The same build with uncompressed layers compares
# like with like.
rm -rf "$work/cache-none" "$work/out-none"
t "quarry cold, --compression none" "$quarry" build "$img" --cache-dir "$work/cache-none" -o "$work/out-none" --compression none
m="mmdebstrap cold (--variant=required)"
ratio() { echo "$1 / mmdebstrap: wall $(echo "scale=2; $(secs "$1" wall) / $(secs "$m" wall)" | bc), CPU $(echo "scale=2; $(secs "$1" cpu) / $(secs "$m" cpu)" | bc)"; }
ratio "quarry cold (resolve, download, build)"
ratio "quarry cold, --compression none"
t "quarry lock" "$quarry" lock "$img" --cache-dir "$work/cache"
t "quarry warm rebuild (layer cache)" "$quarry" build "$img" --cache-dir "$work/cache" -o "$work/out"
t "quarry warm rebuild --no-cache (.deb cache)" "$quarry" build "$img" --cache-dir "$work/cache" -o "$work/out" --no-cache
echo "quarry layer: $(du -b "$work/cache/blobs/sha256" | cut -f1) bytes in the cache (gzip); mmdebstrap tar: $(stat -c %s "$work/mmdebstrap.tar") bytes (uncompressed)"
echo "packages: quarry $(grep -c '^\[\[base\.package' "$work/no_rocm_image_debian12.lock"), mmdebstrap $(tar xOf "$work/mmdebstrap.tar" ./var/lib/dpkg/status | grep -c '^Package:')"

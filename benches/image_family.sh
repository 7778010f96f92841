#!/bin/bash
# What a GPU lab pulls: one target's test image built as a family from
# device-split wheels (`wheels` sources and `[family]`, layers shared but
# the device one) against one fat image of the same fat wheel, as ROCm's
# own images ship (device code for every target in one layer).
#
# usage: benches/image_family.sh [FAT_WHEEL]
#   FAT_WHEEL  a fat ROCm wheel (default: the heavy input of
#              benches/wheel_split.sh, made by `ONLY=heavy benches/wheel_split.sh`:
#              target/bench/split/heavy/heavysplit-1.0-cp311-cp311-linux_x86_64.whl)
#   QUARRY=path  the quarry binary (default: target/release/quarry, built here)
# needs: python3, /usr/bin/time.
#
# Both images are on a scratch base: a real base (no_rocm_image_ubuntu24_04)
# adds the same layers to both and is pulled once per lab either way.
# Rows: compressed bytes a pull moves (the layers' blob sizes) for the fat
# image, for the first member of the family, and for each further target
# (its device layer only, the rest being digest-equal), each with its
# ratio to the fat image; then wall and CPU seconds of the split and of
# each build (/usr/bin/time).
set -eu
cd "$(dirname "$0")/.."
repo=$PWD
fat=${1:-$repo/target/bench/split/heavy/heavysplit-1.0-cp311-cp311-linux_x86_64.whl}
[ -f "$fat" ] || { echo "no fat wheel at $fat: give one, or make it with ONLY=heavy benches/wheel_split.sh" >&2; exit 2; }
if [ -z "${QUARRY:-}" ]; then
    cargo build --release --locked --bin quarry >&2
    quarry=$repo/target/release/quarry
else
    quarry=$(realpath "$QUARRY")
fi
work=$repo/target/bench/family
rm -rf "$work"
mkdir -p "$work/fat" "$work/times"
cp "$fat" "$work/fat/"
echo "quarry: $quarry; input: $fat ($(stat -c %s "$fat") bytes)"
echo "$(date -u +%FT%TZ), nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg)"

timed() { # NAME COMMAND...
    local name=$1
    shift
    /usr/bin/time -f "%e %U %S" -o "$work/times/$name" "$@"
}

timed split "$quarry" wheel split --json -o "$work/house" "$work/fat/$(basename "$fat")" >"$work/split.json"
targets=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))[0]
print(json.dumps([d["key"] for d in r["device"] if d["level"] == "target"]))' "$work/split.json")

cat >"$work/fat.toml" <<EOF
name = "fat-image"
base = "scratch"
[[layer]]
name = "wheels"
[[layer.source]]
wheels = "fat"
EOF
cat >"$work/family.toml" <<EOF
name = "family-image"
tag = "\${GPU_TARGET}"
base = "scratch"
[params]
GPU_TARGET = "none"
[family]
param = "GPU_TARGET"
values = $targets
[[layer]]
name = "host"
[[layer.source]]
wheels = "house"
[[layer]]
name = "device"
[[layer.source]]
wheels = "house"
extra = "device-\${GPU_TARGET}"
EOF
timed fat "$quarry" build "$work/fat.toml" -o "$work/out-fat" --json --cache-dir "$work/cache" >"$work/fat.json"
timed family "$quarry" build "$work/family.toml" -o "$work/out-family" --json --cache-dir "$work/cache" >"$work/family.json"

python3 - "$work" <<'PY'
import json, sys, os
w = sys.argv[1]
fat = json.load(open(os.path.join(w, "fat.json")))
fam = json.load(open(os.path.join(w, "family.json")))["images"]
size = lambda layers: sum(l["size"] for l in layers)
fat_bytes = size(fat["layers"])
print(f"{'image':<34} {'layers':>6} {'compressed bytes':>17} {'vs fat':>7}")
print(f"{'fat image (every target)':<34} {len(fat['layers']):>6} {fat_bytes:>17} {1:>7.2f}")
first = fam[0]
host = first["layers"][0]["digest"]
assert all(m["layers"][0]["digest"] == host for m in fam), "host layers are not digest-equal"
b = size(first["layers"])
print(f"{'family ' + first['tag'] + ' (first pull)':<34} {len(first['layers']):>6} {b:>17} {b / fat_bytes:>7.2f}")
for m in fam[1:]:
    d = m["layers"][1]["size"]
    print(f"{'family ' + m['tag'] + ' (next: device layer)':<34} {1:>6} {d:>17} {d / fat_bytes:>7.2f}")
print(f"{'family: all ' + str(len(fam)) + ' targets pulled':<34} {'':>6} {first['layers'][0]['size'] + sum(m['layers'][1]['size'] for m in fam):>17}")
print()
for name in ["split", "fat", "family"]:
    wall, user, sys_ = open(os.path.join(w, "times", name)).read().split()
    print(f"{name:<8} wall {float(wall):7.2f} s  cpu {float(user) + float(sys_):7.2f} s")
PY

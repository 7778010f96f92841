#!/bin/sh
# Benchmark: `quarry verify` of the main job (images/no_rocm_image_debian12)
# beside the cold build it checks, in the same run: the build from an empty
# cache, then the verify (its rebuild in a fresh private cache: every .deb
# fetched and checked again). Then what provenance and signing cost: the
# `provenance` stage of warm builds (QUARRY_TRACE=1) against their total,
# and warm pushes to a local docker-registry with and without --sign-key.
# Reports wall and CPU seconds and the ratios.
# usage: benches/verify.sh [WORKDIR]   (default: a fresh directory under /tmp)
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d /tmp/quarry-bench-verify.XXXXXX)}
mkdir -p "$work"
cargo build --release --quiet --manifest-path "$repo/Cargo.toml"
quarry="$repo/target/release/quarry"
image="$repo/images/no_rocm_image_debian12.toml"

t() { # t LABEL COMMAND...: wall and CPU seconds of one run (in $work/LABEL.time)
    label=$1; shift
    /usr/bin/time -f '%e %U %S' -o "$work/$label.time" "$@" > "$work/$label.log" 2>&1 || { cat "$work/$label.log" >&2; exit 1; }
    read -r wall user sys < "$work/$label.time"
    printf '%-52s %8.2f s wall %8.2f s CPU\n' "$label" "$wall" "$(echo "$user + $sys" | bc)"
}
secs() { read -r wall user sys < "$work/$1.time"; [ "$2" = wall ] && echo "$wall" || echo "$user + $sys" | bc; }
ratio() { python3 -c 'import sys; a, b, c, d = map(float, sys.argv[3:]); f = lambda x, y: f"{x / y:.2f}" if y else "n/a"; print(f"{sys.argv[1]} / {sys.argv[2]}: wall {f(a, b)}, CPU {f(c, d)}")' "$1" "$2" "$(secs "$1" wall)" "$(secs "$2" wall)" "$(secs "$1" cpu)" "$(secs "$2" cpu)"; }

rm -rf "$work/cache" "$work/out"
cd "$repo"
t "build cold (empty cache)" "$quarry" build "$image" --cache-dir "$work/cache" -o "$work/out"
t "verify (cold rebuild, private cache)" "$quarry" verify "$work/out"
ratio "verify (cold rebuild, private cache)" "build cold (empty cache)"

# Provenance on warm builds: its stage against the whole build command.
start=$(date +%s.%N)
for i in 1 2 3 4 5; do
    QUARRY_TRACE=1 "$quarry" build "$image" --cache-dir "$work/cache" -o "$work/out" -q 2> "$work/trace.$i" || exit 1
done
end=$(date +%s.%N)
echo "warm build command x5: $(echo "$end - $start" | bc) s wall"
python3 - "$work" <<'PY'
import re, sys, glob
total = prov = 0.0
for f in sorted(glob.glob(sys.argv[1] + "/trace.*")):
    text = open(f).read()
    def stage(name):
        # `quarry trace: STAGE  WALL  THREAD_CPU  PROCESS_CPU  SPANS`
        m = re.search(r"quarry trace: " + re.escape(name) + r"\s+([0-9.]+)\s", text)
        return float(m.group(1)) if m else 0.0
    total += stage("build (total)")
    prov += stage("provenance")
print(f"warm builds x5: in-process total {total:.3f} s, provenance stage {prov:.4f} s ({100 * prov / total if total else 0:.1f}% of the in-process build)")
PY

# Signing on warm pushes (every blob already in the registry).
reg="$work/registry"
mkdir -p "$reg"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s/data\nhttp:\n  addr: 127.0.0.1:%s\n' "$reg" "$port" > "$reg/config.yml"
/usr/bin/docker-registry serve "$reg/config.yml" > "$reg/log" 2>&1 &
regpid=$!
trap 'kill $regpid 2>/dev/null || true' EXIT
sleep 1
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/key.pem" 2>/dev/null
"$quarry" push "$work/out" "127.0.0.1:$port/bench/main:v1" --plain-http --cache-dir "$work/cache" -q
t "push warm, unsigned" "$quarry" push "$work/out" "127.0.0.1:$port/bench/main:v1" --plain-http --cache-dir "$work/cache" -q
t "push warm, --sign-key" "$quarry" push "$work/out" "127.0.0.1:$port/bench/main:v1" --plain-http --cache-dir "$work/cache" -q --sign-key "$work/key.pem"
ratio "push warm, --sign-key" "push warm, unsigned"

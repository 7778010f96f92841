#!/bin/bash
# Benchmark `quarry wheel split` on fat ROCm wheels, against the floor
# (reading the input once plus zstd -3 of its device code) and, when given,
# ROCm's reference splitter (rocm_kpack.tools.split_python_wheels) on the
# same inputs, whose output benches/wheel_split_compare.py then compares
# with quarry's.
#
# usage: benches/wheel_split.sh
#   ONLY=small|heavy|debian|databases   one input only (default: all four)
#   QUARRY=path        the quarry binary (default: target/release/quarry, built here)
#   KPACK_REF=DIR      a directory holding the reference's Python package
#                      tree (DIR/rocm_kpack/...); unset: the reference rows
#                      and the comparison are skipped (and said so)
#   PYTHON=path        Python >= 3.12 for the reference's venv (default: the
#                      newest of pyenv's 3.12+ or python3)
#   QUARRY_CACHE_DIR   quarry's package cache for the image build (default
#                      ~/.cache/quarry-tests/packages-cache, the tests' one)
#   HIP_BUILDER=LAYOUT an OCI layout of images/hip-builder-debian13.toml
#                      (default: built once into target/bench/split/)
#   HEAVY_UNITS=6      translation units of the heavy library (16 kernels,
#                      ~5 MB of code objects each; ~1 min a unit on 2 cores)
# needs: /usr/bin/time, unzip, zstd, readelf, objcopy, python3; the image
# build needs what `quarry build` needs.
#
# Inputs, made once under target/bench/split/ and reused (each directory
# has a `done` stamp; remove it to remake):
# - small: the wheel of tests/e2e/wheel_split.rs, built with Debian 13's hipcc
#   (ROCm 5.7, clang 17) in hip-builder-debian13: libvec.so (one unit,
#   gfx90a:xnack+, gfx942, gfx1100), libtwo.so (two units), librdc.so
#   (-fgpu-rdc: two wrappers, one bundle) and a rocBLAS Tensile code object;
# - heavy: libheavy.so, HEAVY_UNITS units of template-instantiated kernels
#   for gfx906, gfx908, gfx90a, gfx942, gfx1030, gfx1100, gfx1101, gfx1102
#   (every processor both hipcc 5.7 and rocm-bootstrap know), >= 20 MB of
#   .hip_fatbin, plus librdc.so (-fgpu-rdc, the same eight targets);
# - debian: Debian 13's own fat librocblas.so.0 and librocsolver.so.0,
#   copied out of hip-builder-debian13, and librccl.so.1 (Debian 13's
#   librccl1, over rocm-runtime-debian13 in an image defined and locked
#   here): 2.3 GB of .hip_fatbin, 10 targets from gfx803 to gfx1102;
# - databases: small's libraries with a file of each kernel-database layout
#   (rocBLAS flat, hipBLASLt and hipSPARSELt per-target folders with a
#   TensileManifest.txt, AOTriton target and family folders, MIOpen db
#   files and a CK per-target library), split with variants and a templated
#   device requirement (quarry: --variants --device-requires-dist; the
#   reference: --generate-variant-wheel --device-requires-dist --databases
#   of all five handlers); benches/wheel_split_variants.py compares routing,
#   METADATA, variant.json, markers and RECORDs.
# Rows per input: quarry split twice (the outputs must be byte-identical),
# `quarry wheel check` of every output wheel (RECORDs valid), the floor
# (unzip -p of the input to /dev/null; zstd -3, one thread, of the fat
# binaries' .hip_fatbin bytes) and the reference (-j 1), each with wall s,
# CPU s (user+sys) and peak RSS from /usr/bin/time.
set -eu
cd "$(dirname "$0")/.."
repo=$PWD
bench=$repo/target/bench/split
only=${ONLY:-}
cache=${QUARRY_CACHE_DIR:-$HOME/.cache/quarry-tests/packages-cache}
heavy_units=${HEAVY_UNITS:-6}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
mkdir -p "$bench"

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
    echo "quarry: $quarry ($built)"
    echo "$(date -u +%FT%TZ), nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

# The venv of the reference and of the comparison: msgpack, zstandard and
# rocm-bootstrap from PyPI, under a Python >= 3.12 (the reference's
# binutils.py uses TemporaryDirectory(delete=False)).
venv() {
    local py=${PYTHON:-}
    if [ -z "$py" ]; then
        py=$(ls -d "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -V | tail -1)
        [ -n "$py" ] || py=python3
    fi
    vpy=$bench/venv/bin/python
    if [ ! -x "$vpy" ] || ! "$vpy" -c 'import msgpack, zstandard, rocm_bootstrap' 2>/dev/null; then
        rm -rf "$bench/venv"
        "$py" -m venv "$bench/venv"
        "$bench/venv/bin/pip" install -q msgpack zstandard rocm-bootstrap >&2
    fi
    [ -z "${KPACK_REF:-}" ] || "$vpy" -c 'import sys; sys.exit(sys.version_info < (3, 12))' \
        || { echo "the venv's Python is older than 3.12 (the reference needs it): set PYTHON" >&2; exit 1; }
}

# The hip-builder-debian13 image, built once (a warm package cache makes
# that a few minutes the first time).
builder() {
    if [ -n "${HIP_BUILDER:-}" ]; then
        layout=$(realpath "$HIP_BUILDER")
    else
        layout=$bench/hip-builder-debian13
        if [ ! -f "$layout.done" ]; then
            "$quarry" build images/hip-builder-debian13.toml --cache-dir "$cache" -o "$layout" --quiet
            touch "$layout.done"
        fi
    fi
}

# Run SCRIPT in the image with SRC at /work/src; /work/out comes back as OUT.
in_image() { # SRC OUT SCRIPT
    rm -rf "$2.tmp"
    mkdir -p "$2.tmp"
    "$quarry" run "$layout" --gpu none --cache-dir "$cache" --copy-in "$1:/work/src" \
        --copy-out "/work/out:$2.tmp" -- sh -ec "$3"
}

# A wheel of FILES (ARC=PATH ...), deterministic: fixed times and modes,
# members sorted, a RECORD in urlsafe base64.
mkwheel() { # OUT NAME TAG ARC=PATH...
    python3 - "$@" <<'PY'
import base64, hashlib, sys, zipfile
out, name, tag, pairs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
di = "%s-1.0.dist-info" % name
files = {"%s/__init__.py" % name: b""}
for p in pairs:
    arc, path = p.split("=", 1)
    files[arc] = open(path, "rb").read()
files[di + "/METADATA"] = ("Metadata-Version: 2.1\nName: %s\nVersion: 1.0\nSummary: quarry split bench input\n" % name).encode()
files[di + "/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: quarry-bench\nRoot-Is-Purelib: false\nTag: %s\n" % tag).encode()
record = []
with zipfile.ZipFile(out + ".tmp", "w", zipfile.ZIP_DEFLATED, compresslevel=6) as z:
    for arc in sorted(files):
        data = files[arc]
        i = zipfile.ZipInfo(arc, (2023, 11, 14, 22, 13, 20))
        i.external_attr = (0o100755 if data[:4] == b"\x7fELF" else 0o100644) << 16
        i.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(i, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (arc, digest, len(data)))
    record.append(di + "/RECORD,,")
    i = zipfile.ZipInfo(di + "/RECORD", (2023, 11, 14, 22, 13, 20))
    i.external_attr = 0o100644 << 16
    z.writestr(i, "\n".join(record) + "\n", zipfile.ZIP_DEFLATED)
PY
    mv "$1.tmp" "$1"
}

# --- inputs --------------------------------------------------------------

small_input() {
    local d=$bench/small
    name=hipsplit
    wheel=$d/hipsplit-1.0-cp311-cp311-linux_x86_64.whl
    ref_extra="--databases rocblas"
    [ -f "$d/done" ] && return
    builder
    in_image "$repo/tests/fixtures/hip" "$d" '
        cd /work/src
        mkdir -p /work/out
        hipcc --offload-arch=gfx90a:xnack+ --offload-arch=gfx942 --offload-arch=gfx1100 -shared -fPIC -o /work/out/libvec.so split_a.hip
        hipcc --offload-arch=gfx942 --offload-arch=gfx1100 -shared -fPIC -o /work/out/libtwo.so split_a.hip split_b.hip
        hipcc -fgpu-rdc --offload-arch=gfx90a:xnack+ --offload-arch=gfx942 -shared -fPIC -o /work/out/librdc.so split_a.hip split_b.hip
        lib=$(echo /usr/lib/x86_64-linux-gnu/rocblas/*/library)
        cp "$lib"/Kernels.so-000-gfx90a-xnack+.hsaco /work/out/'
    local b=$d.tmp
    mkdir -p "$d"
    mkwheel "$wheel" hipsplit cp311-cp311-linux_x86_64 \
        "hipsplit/lib/libvec.so=$b/libvec.so" "hipsplit/libtwo.so=$b/libtwo.so" "hipsplit/librdc.so=$b/librdc.so" \
        "hipsplit/lib/rocblas/library/Kernels.so-000-gfx90a-xnack+.hsaco=$b/Kernels.so-000-gfx90a-xnack+.hsaco"
    mv "$b"/*.so "$d/"
    rm -rf "$b"
    touch "$d/done"
}

# HEAVY_UNITS units of 16 kernels each (a template instantiated per
# constant; unrolled math makes each tens of KB per target).
heavy_sources() { # DIR
    python3 "$repo/benches/heavy_sources.py" "$1" "$heavy_units"
}

heavy_input() {
    local d=$bench/heavy src=$bench/heavy-src archs
    name=heavysplit
    wheel=$d/heavysplit-1.0-cp311-cp311-linux_x86_64.whl
    ref_extra=
    [ -f "$d/done" ] && return
    builder
    rm -rf "$src"
    heavy_sources "$src"
    cp tests/fixtures/hip/split_a.hip tests/fixtures/hip/split_b.hip "$src/"
    archs="--offload-arch=gfx906 --offload-arch=gfx908 --offload-arch=gfx90a --offload-arch=gfx942"
    archs="$archs --offload-arch=gfx1030 --offload-arch=gfx1100 --offload-arch=gfx1101 --offload-arch=gfx1102"
    in_image "$src" "$d" "
        cd /work/src
        mkdir -p /work/out/o
        ls unit*.hip | xargs -P $(nproc) -I{} sh -ec 'hipcc $archs -O2 -fPIC -c -o /work/out/o/{}.o {}'
        hipcc $archs -shared -fPIC -o /work/out/libheavy.so /work/out/o/*.o
        rm -rf /work/out/o
        hipcc -fgpu-rdc $archs -shared -fPIC -o /work/out/librdc.so split_a.hip split_b.hip"
    mkdir -p "$d"
    mkwheel "$wheel" heavysplit cp311-cp311-linux_x86_64 \
        "heavysplit/lib/libheavy.so=$d.tmp/libheavy.so" "heavysplit/lib/librdc.so=$d.tmp/librdc.so"
    mv "$d.tmp"/*.so "$d/"
    rm -rf "$d.tmp"
    touch "$d/done"
}

databases_input() {
    local d=$bench/databases s=$bench/small f
    small_input
    name=hipdb
    wheel=$d/hipdb-1.0-cp311-cp311-linux_x86_64.whl
    ref_extra="--databases rocblas hipblaslt hipsparselt aotriton miopen --generate-variant-wheel"
    ref_extra_req="rocm-sdk-device-@GFXARCH@ == 7.1"
    q_extra="--variants"
    [ -f "$d/done" ] && return
    mkdir -p "$d/files"
    for f in hipblaslt-manifest hipsparselt-dat aotriton-942 aotriton-11xx miopen-kdb miopen-fdb ck fallback; do
        echo "$f kernels" > "$d/files/$f"
    done
    # small's Tensile code object, as its wheel holds it.
    unzip -p "$s/hipsplit-1.0-cp311-cp311-linux_x86_64.whl" \
        'hipsplit/lib/rocblas/library/Kernels.so-000-gfx90a-xnack+.hsaco' > "$d/files/tensile.hsaco"
    mkwheel "$wheel" hipdb cp311-cp311-linux_x86_64 \
        "hipdb/lib/libvec.so=$s/libvec.so" "hipdb/libtwo.so=$s/libtwo.so" "hipdb/librdc.so=$s/librdc.so" \
        "hipdb/lib/rocblas/library/Kernels.so-000-gfx90a-xnack+.hsaco=$d/files/tensile.hsaco" \
        "hipdb/lib/rocblas/library/TensileLibrary_fallback.dat=$d/files/fallback" \
        "hipdb/lib/hipblaslt/library/gfx942/TensileManifest.txt=$d/files/hipblaslt-manifest" \
        "hipdb/lib/hipsparselt/library/gfx90a/TensileLibrary_x_fallback.dat=$d/files/hipsparselt-dat" \
        "hipdb/lib/aotriton.images/amd-gfx942/flash/attn_fwd/k.aks2=$d/files/aotriton-942" \
        "hipdb/lib/aotriton.images/amd-gfx11xx/flash/bwd/k.aks2=$d/files/aotriton-11xx" \
        "hipdb/share/miopen/db/gfx942130.kdb=$d/files/miopen-kdb" \
        "hipdb/share/miopen/db/gfx90a110.HIP.fdb.txt=$d/files/miopen-fdb" \
        "hipdb/lib/libMIOpenCKGroupConv_gfx90a.so=$d/files/ck"
    touch "$d/done"
}

debian_input() {
    local d=$bench/debian
    name=deb13rocm
    wheel=$d/deb13rocm-1.0-py3-none-linux_x86_64.whl
    ref_extra=
    [ -f "$d/done" ] && return
    builder
    in_image "$repo/tests/fixtures/hip" "$d" '
        mkdir -p /work/out
        cd /usr/lib/x86_64-linux-gnu
        cp -L librocblas.so.0 librocsolver.so.0 /work/out/'
    # RCCL is not in hip-builder-debian13: Debian 13's librccl1 over the
    # runtime image, built from a definition written here (pinned by its lock).
    local rccl=$bench/rccl-debian13
    mkdir -p "$rccl"
    cat > "$rccl/rccl-debian13.toml" <<TOML
name = "rccl-debian13"
base = { image = "$repo/images/rocm-runtime-debian13.toml" }
[params]
DEBIAN_MIRROR = "host"
[[layer]]
name = "rccl"
[[layer.source]]
[layer.source.packages]
suite = "trixie"
components = ["main"]
mirror = "\${DEBIAN_MIRROR}"
keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
include = ["librccl1"]
TOML
    [ -f "$rccl/rccl-debian13.lock" ] || "$quarry" lock "$rccl/rccl-debian13.toml" --cache-dir "$cache"
    "$quarry" build "$rccl/rccl-debian13.toml" --cache-dir "$cache" -o "$rccl/layout" --quiet
    # (The runtime image's user is not root: /tmp, not /work.)
    rm -rf "$d.rccl"
    "$quarry" run "$rccl/layout" --gpu none --cache-dir "$cache" --copy-out "/tmp/out:$d.rccl" \
        -- sh -ec 'mkdir -p /tmp/out && cp -L /usr/lib/x86_64-linux-gnu/librccl.so.1 /tmp/out/'
    mv "$d.rccl/librccl.so.1" "$d.tmp/"
    rm -rf "$d.rccl"
    mkdir -p "$d"
    mkwheel "$wheel" deb13rocm py3-none-linux_x86_64 \
        "deb13rocm/lib/librocblas.so.0=$d.tmp/librocblas.so.0" "deb13rocm/lib/librocsolver.so.0=$d.tmp/librocsolver.so.0" \
        "deb13rocm/lib/librccl.so.1=$d.tmp/librccl.so.1"
    mv "$d.tmp"/* "$d/"
    rm -rf "$d.tmp"
    touch "$d/done"
}

# --- measuring -----------------------------------------------------------

# Rows are lines "input|row|wall s|cpu s|rss KiB|note" in $rows.
rows=$bench/rows.txt

timed() { # INPUT ROW CMD... (status kept in $rc, stderr in $bench/stderr.txt)
    local input=$1 row=$2
    shift 2
    rc=0
    /usr/bin/time -f '%e %U %S %M' -o "$bench/time.txt" "$@" > "$bench/stdout.txt" 2> "$bench/stderr.txt" || rc=$?
    tail -1 "$bench/time.txt" | awk -v i="$input" -v r="$row" -v rc="$rc" \
        '{ printf "%s|%s|%.2f|%.2f|%d|%s\n", i, r, $1, $2 + $3, $4, (rc == 0 ? "" : "exit " rc) }' >> "$rows"
}

# The fat binaries' .hip_fatbin bytes, concatenated (the floor's input),
# with each section's size as readelf -S gives it.
fatbin_bytes() { # WHEEL OUT
    python3 - "$1" "$2" <<'PY'
import struct, subprocess, sys, tempfile, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    for name in sorted(z.namelist()):
        data = z.read(name)
        if data[:4] != b"\x7fELF":
            continue
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        sh = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        names = data[sh[shstrndx][4]:sh[shstrndx][4] + sh[shstrndx][5]]
        for s in sh:
            if names[s[0]:names.index(b"\0", s[0])] == b".hip_fatbin":
                out.write(data[s[4]:s[4] + s[5]])
                with tempfile.NamedTemporaryFile() as t:
                    t.write(data)
                    t.flush()
                    line = [l for l in subprocess.run(["readelf", "-SW", t.name], capture_output=True,
                                                      text=True).stdout.splitlines() if " .hip_fatbin " in l]
                print("  %s: .hip_fatbin %d bytes (%.1f MB); readelf -SW: %s" % (
                    name, s[5], s[5] / 1e6, " ".join(line[0].split()) if line else "?"))
PY
}

measure() { # INPUT (after its *_input: $name, $wheel, $ref_extra)
    local input=$1 q1=$bench/out-$1-1 q2=$bench/out-$1-2 ref=$bench/ref-$1 prefix=$name-device f
    echo "== $input: $(basename "$wheel"), $(stat -c %s "$wheel") bytes"
    cat "$wheel" > /dev/null
    rm -rf "$q1" "$q2"
    # shellcheck disable=SC2086
    timed "$input" "quarry split" "$quarry" wheel split --json --device-prefix "$prefix" -o "$q1" "$wheel" $q_extra \
        ${ref_extra_req:+--device-requires-dist "$ref_extra_req"}
    [ "$rc" = 0 ] || { cat "$bench/stderr.txt" >&2; exit 1; }
    # shellcheck disable=SC2086
    timed "$input" "quarry split again" "$quarry" wheel split --json --device-prefix "$prefix" -o "$q2" "$wheel" \
        $q_extra ${ref_extra_req:+--device-requires-dist "$ref_extra_req"}
    [ "$rc" = 0 ] || { cat "$bench/stderr.txt" >&2; exit 1; }
    (cd "$q1" && ls) > "$bench/names1.txt"
    (cd "$q2" && ls) > "$bench/names2.txt"
    cmp -s "$bench/names1.txt" "$bench/names2.txt" || { echo "quarry's two runs made other files" >&2; exit 1; }
    while IFS= read -r f; do
        cmp -s "$q1/$f" "$q2/$f" || { echo "OUTPUT DIFFERS between quarry runs: $f" >&2; exit 1; }
    done < "$bench/names1.txt"
    echo "quarry: $(wc -l < "$bench/names1.txt") wheels, byte-identical across runs:"
    (cd "$q1" && stat -c '  %n %s' -- *)
    # The classic set (variant host wheels are alternatives to the host wheel).
    timed "$input" "quarry wheel check" "$quarry" wheel check $(ls "$q1"/*.whl | grep -v 'linux_x86_64-')
    [ "$rc" = 0 ] || { echo "quarry wheel check failed:" >&2; cat "$bench/stdout.txt" "$bench/stderr.txt" >&2; exit 1; }
    echo "quarry wheel check: every output passes"
    # The floor.
    timed "$input" "floor: unzip -p" unzip -p "$wheel"
    fatbin_bytes "$wheel" "$bench/fatbin-$input.bin"
    echo "  .hip_fatbin total: $(stat -c %s "$bench/fatbin-$input.bin") bytes"
    timed "$input" "floor: zstd -3 of .hip_fatbin" zstd -3 -T1 -q -c "$bench/fatbin-$input.bin"
    rm -f "$bench/fatbin-$input.bin"
    rm -rf "$q2"
    if [ -n "${KPACK_REF:-}" ]; then
        rm -rf "$ref"
        # shellcheck disable=SC2086
        timed "$input" "reference (-j 1)" env PYTHONPATH="$KPACK_REF" PYTHONDONTWRITEBYTECODE=1 "$vpy" \
            -m rocm_kpack.tools.split_python_wheels --input "$wheel" --output-dir "$ref" \
            --device-package-prefix "$prefix" --overlay-root "$name/" -j 1 $ref_extra \
            ${ref_extra_req:+--device-requires-dist "$ref_extra_req"}
        if [ "$rc" = 0 ] && [ "$input" = databases ]; then
            echo "-- comparison (benches/wheel_split_variants.py)"
            "$vpy" benches/wheel_split_variants.py "$q1" "$ref" || echo "COMPARISON: unexplained differences (above)"
        elif [ "$rc" = 0 ]; then
            echo "reference: $(find "$ref" -maxdepth 1 -name '*.whl' | wc -l) wheels"
            (cd "$ref" && stat -c '  %n %s' -- *.whl)
            echo "-- comparison (benches/wheel_split_compare.py)"
            "$vpy" benches/wheel_split_compare.py "$wheel" "$q1" "$ref" \
                || echo "COMPARISON: unexplained differences (above)"
        else
            local why
            why=$(grep -v '^ ' "$bench/stderr.txt" | grep -v '^Traceback' | tail -1)
            echo "reference failed (exit $rc): $why"
            sed -i '$ s/|exit \([0-9]*\)$/|exit \1: '"$(printf '%s' "$why" | tr '|/&' '   ' | cut -c1-100)"'/' "$rows"
            quarry_alone
        fi
        rm -rf "$ref"
    else
        quarry_alone
    fi
}

# No reference output: quarry's archives against the input alone (every
# kernel decoded and compared with the code object its wrapper registered,
# every code object of the input found in an archive).
quarry_alone() {
    echo "-- quarry's archives against the input (benches/wheel_split_compare.py, no reference)"
    "$vpy" benches/wheel_split_compare.py "$wheel" "$q1" - || echo "CHECK: kernels not the input's (above)"
}

report() {
    python3 - "$rows" <<'PY'
import sys
rows = [l.rstrip("\n").split("|") for l in open(sys.argv[1]) if l.strip()]
print("\n%-7s %-30s %8s %8s %12s  %s" % ("input", "row", "wall s", "CPU s", "peak RSS MB", "note"))
by = {}
for inp, row, wall, cpu, rss, note in rows:
    by.setdefault(inp, {})[row] = (float(wall), float(cpu), int(rss) / 1024, note)
    print("%-7s %-30s %8.2f %8.2f %12.0f  %s" % (inp, row, float(wall), float(cpu), int(rss) / 1024, note))
for inp, r in by.items():
    q = min(r["quarry split"], r["quarry split again"])
    fw = r["floor: unzip -p"][0] + r["floor: zstd -3 of .hip_fatbin"][0]
    fc = r["floor: unzip -p"][1] + r["floor: zstd -3 of .hip_fatbin"][1]
    line = "%s: quarry/floor wall %.2fx, CPU %.2fx" % (inp, q[0] / fw if fw else float("inf"), q[1] / fc if fc else float("inf"))
    ref = r.get("reference (-j 1)")
    if ref and not ref[3]:
        line += "; reference/quarry wall %.2fx, CPU %.2fx, peak RSS %.1fx" % (ref[0] / q[0], ref[1] / q[1], ref[2] / q[2])
    elif ref:
        line += "; reference failed (%s)" % ref[3]
    print(line)
PY
}

# --- main ----------------------------------------------------------------

case $only in
    ""|small|heavy|debian|databases) ;;
    *) echo "ONLY=$only: expected small, heavy, debian or databases" >&2; exit 2 ;;
esac
build_tools
if [ -n "${KPACK_REF:-}" ]; then
    KPACK_REF=$(realpath "$KPACK_REF")
    [ -d "$KPACK_REF/rocm_kpack" ] || { echo "KPACK_REF=$KPACK_REF has no rocm_kpack/" >&2; exit 2; }
    venv
    echo "reference: $KPACK_REF, run with $("$vpy" --version)"
else
    venv
    echo "reference rows skipped: KPACK_REF is not set (quarry's archives are checked against the input alone)"
fi
: > "$rows"
for input in small heavy debian databases; do
    [ -z "$only" ] || [ "$only" = "$input" ] || continue
    q_extra= ref_extra_req=
    "${input}_input"
    measure "$input"
done
report

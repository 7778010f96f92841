#!/bin/bash
# Benchmark a build sharded by GPU target against the fat build, and
# `quarry wheel merge` against `quarry wheel split`.
#
# The project: the heavy library of benches/wheel_split.sh (UNITS units of
# template-instantiated kernels, device compile dominating) plus the
# -fgpu-rdc library of tests/e2e/wheel_merge.rs, for gfx90a, gfx942 and
# gfx1100, compiled with Debian 13's hipcc in hip-builder-debian13 and
# linked as `wheel build` links split builds and shards (.hip_fatbin last).
# - fat: one build for the three targets (units compiled $(nproc) at a time);
# - shards: three builds of one target each, a Slurm job array on a
#   one-node Slurm started here (benches/slurm_node.sh): at --parallel 1
#   (`%1`, each task given every CPU and compiling $(nproc) units at a
#   time) and at --parallel 2 (`%2`, each task half the CPUs). Each build is
#   its own container; CPU is the compiler's (user+sys of the build's
#   children, measured inside the container: the engine's processes are
#   children of neither Slurm nor quarry); wall is from sbatch to the
#   array's end.
# - merge: `quarry wheel merge` of the three shard wheels against
#   `quarry wheel split` of the fat wheel: wall s, CPU s, peak RSS
#   (/usr/bin/time), and the outputs must be byte-identical.
#
# usage: benches/wheel_merge.sh
#   QUARRY=path     the quarry binary (default: target/release/quarry, built here)
#   UNITS=4         translation units of the heavy library
#   QUARRY_CACHE_DIR, HIP_BUILDER: as benches/wheel_split.sh
# needs: slurm-wlm and munge (scripts/setup installs them), root.
set -eu
cd "$(dirname "$0")/.."
repo=$PWD
bench=$repo/target/bench/merge
cache=${QUARRY_CACHE_DIR:-$HOME/.cache/quarry-tests/packages-cache}
units=${UNITS:-4}
targets="gfx90a gfx942 gfx1100"
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
mkdir -p "$bench"
for t in slurmctld slurmd sbatch squeue munged mungekey; do
    command -v "$t" >/dev/null 2>&1 || { echo "needs $t: run scripts/setup" >&2; exit 1; }
done
pids=""
cleanup() {
    [ -n "${SLURM_CONF:-}" ] && scancel --full -u "$(id -un)" >/dev/null 2>&1 || true
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    rm -rf "$bench/slurm"
}
trap cleanup EXIT

. "$repo/benches/slurm_node.sh"
if [ -z "${QUARRY:-}" ]; then
    cargo build --release --locked --bin quarry >&2
    quarry=$repo/target/release/quarry
else
    quarry=$(realpath "$QUARRY")
fi
echo "quarry: $quarry; $(date -u +%FT%TZ), nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "${HIP_BUILDER:-}" ]; then
    layout=$(realpath "$HIP_BUILDER")
else
    layout=$bench/hip-builder-debian13
    if [ ! -f "$layout.done" ]; then
        "$quarry" build images/hip-builder-debian13.toml --cache-dir "$cache" -o "$layout" --quiet
        touch "$layout.done"
    fi
fi

src=$bench/src
rm -rf "$src"
python3 benches/heavy_sources.py "$src" "$units"
cp tests/fixtures/hip/split_a.hip tests/fixtures/hip/split_b.hip "$src/"
cat > "$src/last.ld" <<'EOF'
SECTIONS
{
  .hip_fatbin ALIGN(0x1000) : { KEEP(*(.hip_fatbin)) }
}
INSERT AFTER .bss;
EOF
# The build inside the container: compile every unit (JOBS at a time), link
# both libraries; print the compiler's CPU seconds (the children's rusage).
cat > "$src/build.py" <<'EOF'
import glob, os, resource, subprocess, sys
jobs, archs = sys.argv[1], ["--offload-arch=" + a for a in sys.argv[2:]]
link = ["-shared", "-fPIC", "-Wl,-T,/work/src/last.ld"]
os.makedirs("/work/out/o", exist_ok=True)
units = sorted(glob.glob("/work/src/unit*.hip"))
cmds = [["hipcc", *archs, "-O2", "-fPIC", "-c", "-o", "/work/out/o/%s.o" % os.path.basename(u), u] for u in units]
running = []
for c in cmds:
    running.append(subprocess.Popen(c))
    if len(running) >= int(jobs):
        assert running.pop(0).wait() == 0
for p in running:
    assert p.wait() == 0
subprocess.run(["hipcc", *archs, *link, "-o", "/work/out/libheavy.so", *sorted(glob.glob("/work/out/o/*.o"))], check=True)
subprocess.run(["hipcc", "-fgpu-rdc", *archs, *link, "-o", "/work/out/librdc.so", "/work/src/split_a.hip", "/work/src/split_b.hip"], check=True)
subprocess.run(["rm", "-rf", "/work/out/o"], check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print("CPU %.2f" % (r.ru_utime + r.ru_stime))
EOF

# One build: NAME JOBS TARGET...; its libraries land in $bench/NAME, its
# compiler CPU seconds in $bench/NAME.cpu. A script, so Slurm's tasks run it.
cat > "$bench/build_one.sh" <<EOF
#!/bin/bash
set -eu
name=\$1 jobs=\$2
shift 2
rm -rf "$bench/\$name" "$bench/\$name.tmp"
mkdir -p "$bench/\$name.tmp"
"$quarry" run "$layout" --gpu none --cache-dir "$cache" --copy-in "$src:/work/src" \\
    --copy-out "/work/out:$bench/\$name.tmp" -- python3 /work/src/build.py "\$jobs" "\$@" >"$bench/\$name.log" 2>&1 \\
    || { cat "$bench/\$name.log" >&2; exit 1; }
mv "$bench/\$name.tmp" "$bench/\$name"
grep '^CPU ' "$bench/\$name.log" | cut -d' ' -f2 >"$bench/\$name.cpu"
EOF
chmod +x "$bench/build_one.sh"
rm -f "$bench"/*.cpu
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
wheel_of() { # DIR
    python3 - "$1" <<'PY'
import base64, hashlib, sys, zipfile
d = sys.argv[1]
files = {"heavymerge/__init__.py": b"", "heavymerge/lib/libheavy.so": open(d + "/libheavy.so", "rb").read(),
         "heavymerge/lib/librdc.so": open(d + "/librdc.so", "rb").read()}
di = "heavymerge-1.0.dist-info"
files[di + "/METADATA"] = b"Metadata-Version: 2.1\nName: heavymerge\nVersion: 1.0\n"
files[di + "/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: quarry-bench\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n"
rec = ["%s,sha256=%s,%d" % (n, base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode(), len(b)) for n, b in files.items()]
files[di + "/RECORD"] = ("\n".join(rec + [di + "/RECORD,,"]) + "\n").encode()
with zipfile.ZipFile(d + "/heavymerge-1.0-cp311-cp311-linux_x86_64.whl", "w", zipfile.ZIP_DEFLATED) as z:
    for n in sorted(files):
        i = zipfile.ZipInfo(n, (2023, 11, 14, 22, 13, 20))
        i.external_attr = (0o100755 if files[n][:4] == b"\x7fELF" else 0o100644) << 16
        z.writestr(i, files[n], zipfile.ZIP_DEFLATED)
PY
}

# The three shards as a Slurm array, PARALLEL at a time, each task given
# its share of the CPUs; prints the wall seconds from sbatch to the end.
on_slurm() { # PARALLEL
    local p=$1 cpus=$(( $(nproc) / $1 > 0 ? $(nproc) / $1 : 1 ))
    cat > "$bench/shards-p$p.sbatch" <<EOF
#!/bin/bash
#SBATCH --job-name=quarry-merge-bench
#SBATCH --array=0-2%$p
#SBATCH --cpus-per-task=$cpus
#SBATCH --mem=2G
#SBATCH --output=$bench/slurm-p$p-%a.out
targets=($targets)
t=\${targets[\$SLURM_ARRAY_TASK_ID]}
exec "$bench/build_one.sh" "p$p-\$t" $cpus "\$t"
EOF
    local t0 job
    t0=$(now)
    job=$(sbatch --parsable "$bench/shards-p$p.sbatch" | cut -d';' -f1)
    while [ -n "$(squeue -h -j "$job" -o %i 2>/dev/null)" ]; do sleep 0.2; done
    since "$t0"
    for t in $targets; do
        [ -f "$bench/p$p-$t.cpu" ] || { cat "$bench"/slurm-p"$p"-*.out >&2; exit 1; }
    done
}

t0=$(now); "$bench/build_one.sh" fat "$(nproc)" $targets; fat_wall=$(since "$t0")
slurm_node "$bench/slurm"
p1_wall=$(on_slurm 1)
p2_wall=$(on_slurm 2)

wheel_of "$bench/fat"
shards=""
for t in $targets; do wheel_of "$bench/p1-$t"; shards="$shards $bench/p1-$t/heavymerge-1.0-cp311-cp311-linux_x86_64.whl"; done
rm -rf "$bench/out-split" "$bench/out-merge"
/usr/bin/time -f "%e %U %S %M" -o "$bench/split.time" "$quarry" wheel split -o "$bench/out-split" \
    "$bench/fat/heavymerge-1.0-cp311-cp311-linux_x86_64.whl" >/dev/null
# shellcheck disable=SC2086
/usr/bin/time -f "%e %U %S %M" -o "$bench/merge.time" "$quarry" wheel merge -o "$bench/out-merge" $shards >/dev/null
identical=yes
for f in "$bench"/out-split/*.whl; do
    cmp -s "$f" "$bench/out-merge/$(basename "$f")" || identical=no
done
[ "$(ls "$bench"/out-split | wc -l)" = "$(ls "$bench"/out-merge | wc -l)" ] || identical=no

python3 - "$bench" "$fat_wall" "$p1_wall" "$p2_wall" "$identical" $targets <<'PY'
import os, sys
bench, fat_wall, p1, p2, identical, targets = sys.argv[1], *map(float, sys.argv[2:5]), sys.argv[5], sys.argv[6:]
cpu = lambda n: float(open(os.path.join(bench, n + ".cpu")).read())
fat = cpu("fat")
size = lambda d: sum(os.path.getsize(os.path.join(bench, d, f)) for f in ("libheavy.so", "librdc.so"))
print("fat build (%s): wall %.1f s, compiler CPU %.1f s, %.1f MB of libraries" % (", ".join(targets), fat_wall, fat, size("fat") / 1e6))
shard_cpu = 0.0
for t in targets:
    c = cpu("p1-" + t)
    shard_cpu += c
    print("  shard %-8s compiler CPU %6.1f s (%.2f of the fat build's)" % (t, c, c / fat))
print("shards' CPU together: %.1f s, %.2fx the fat build's" % (shard_cpu, shard_cpu / fat))
print("wall, three shards at --parallel 1: %.1f s (%.2fx the fat build's)" % (p1, p1 / fat_wall))
print("wall, three shards at --parallel 2: %.1f s (%.2fx the fat build's)" % (p2, p2 / fat_wall))
def t(n):
    w, u, s, m = open(os.path.join(bench, n + ".time")).read().split()
    return float(w), float(u) + float(s), int(m) / 1024
sw, sc, sm = t("split")
mw, mc, mm = t("merge")
print("wheel split of the fat wheel: wall %.2f s, CPU %.2f s, peak RSS %.0f MB" % (sw, sc, sm))
print("wheel merge of the 3 shards:  wall %.2f s, CPU %.2f s, peak RSS %.0f MB (merge/split wall %.2fx)" % (mw, mc, mm, mw / sw))
print("merged wheels byte-identical to the split of the fat build: %s" % identical)
PY

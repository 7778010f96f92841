#!/usr/bin/env bash
# Layer packing benchmark: quarry's gzip, zstd and uncompressed layers against
# `tar -c | gzip -6`, `tar -c | pigz -6 -p2`, `tar -c | zstd -3 -T2` and
# `tar -c > file`, on two input trees copied from /usr: `large`, >= 1 GB of
# mixed files, and `small`, ~500 MB of ~50k small files (a Python
# environment, an include tree, /usr/share); per tree also a first build from
# an empty cache and its no-op rebuild (for `large`, of a ~2 GB tree). Prints
# a table per tree: seconds, MB/s of input, throughput and size ratios
# against the baseline tool, output size, peak RSS (GNU time).
#
# Usage: benches/pack.sh            (RUNS=3 benches/pack.sh: 3 rounds, medians;
#                                    TREES=small benches/pack.sh: one tree)
# Inputs and outputs live under target/bench/ (about 9 GB of disk).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
BENCH=$ROOT/target/bench
RUNS=${RUNS:-1}
TREES=${TREES:-large small}
mkdir -p "$BENCH"

for tool in tar gzip pigz zstd python3; do
    command -v "$tool" >/dev/null || { echo "pack.sh: \`$tool\` is missing (apt-get install $tool)" >&2; exit 1; }
done
if ! /usr/bin/time -v true >/dev/null 2>&1; then
    echo "pack.sh: GNU time (/usr/bin/time) is missing; installing the Debian package \`time\`" >&2
    apt-get install -y time >/dev/null
fi

echo "building target/release/quarry..." >&2
cargo build --release --quiet
Q=$ROOT/target/release/quarry

# Copy /usr directories into a tree once; later runs reuse it.
make_tree() {
    local dest=$1 min_mb=$2
    shift 2
    if [ ! -e "$dest/.complete" ]; then
        echo "copying $* into $dest..." >&2
        rm -rf "$dest"
        mkdir -p "$dest"
        local d
        for d in "$@"; do
            mkdir -p "$dest/$(dirname "$d")"
            cp -a "$d" "$dest/$d"
        done
        # A machine with fewer packages has a smaller /usr: top up with more
        # of /usr/lib, one directory at a time, until the tree is big enough.
        for d in /usr/lib/*/; do
            d=${d%/}
            [ "$(($(du -sb "$dest" | cut -f1) / 1000000))" -ge "$min_mb" ] && break
            [ -e "$dest/$d" ] && continue
            mkdir -p "$dest/$(dirname "$d")"
            cp -a "$d" "$dest/$d"
        done
        touch "$dest/.complete"
    fi
    local mb=$(($(du -sb --exclude=.complete "$dest" | cut -f1) / 1000000))
    if [ "$mb" -lt "$min_mb" ]; then
        echo "pack.sh: $dest holds only $mb MB (want $min_mb); this machine's /usr is too small" >&2
        exit 1
    fi
}
# The small-file tree: regular files of at most 512 KiB and symlinks from
# these /usr directories, walked in sorted path order, until 500 MB or 52,000
# entries; the same /usr always gives the same tree.
make_small_tree() {
    local dest=$1
    if [ ! -e "$dest/.complete" ]; then
        echo "copying small files of /usr into $dest..." >&2
        rm -rf "$dest"
        python3 - "$dest" /usr/bin /usr/lib/python3 /usr/lib/x86_64-linux-gnu /usr/share <<'PY'
import os, shutil, stat, sys
dest, roots = sys.argv[1], sys.argv[2:]
total = count = 0
def entries():
    for root in roots:
        for d, dirs, files in os.walk(root):
            dirs.sort()
            for f in sorted(files):
                yield os.path.join(d, f)
for src in entries():
    st = os.lstat(src)
    if not (stat.S_ISLNK(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_size <= 512 << 10)):
        continue
    if not stat.S_ISLNK(st.st_mode) and not os.access(src, os.R_OK):
        continue
    out = dest + src
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), out)
    else:
        shutil.copy2(src, out)
        total += st.st_size
    count += 1
    if total >= 500_000_000 or count >= 52_000:
        break
print(f"{count} entries, {total / 1e6:.0f} MB", file=sys.stderr)
PY
        touch "$dest/.complete"
    fi
}
TREE_large=$BENCH/tree-1g
NOOP_TREE_large=$BENCH/tree-2g
TREE_small=$BENCH/tree-small
NOOP_TREE_small=$TREE_small
MIXED=(/usr/bin /usr/sbin /usr/include /usr/share /usr/libexec)
for which in $TREES; do
    case $which in
        large)
            make_tree "$TREE_large" 1000 "${MIXED[@]}"
            make_tree "$NOOP_TREE_large" 2000 "${MIXED[@]}" /usr/lib/x86_64-linux-gnu /usr/lib/gcc
            ;;
        small) make_small_tree "$TREE_small" ;;
        *) echo "pack.sh: TREES takes \`large\` and \`small\`, not \`$which\`" >&2; exit 1 ;;
    esac
done

# Image definitions: one `dir` layer each.
image() {
    local file=$1 name=$2 tree=$3
    cat >"$file" <<EOF
name = "$name"
base = "scratch"
[[layer]]
name = "tree"
[[layer.source]]
dir = "$tree"
dest = "/opt/tree"
exclude = [".complete"]
EOF
}

OUT=$BENCH/out
mkdir -p "$OUT"

# Rows are run in rounds (every row once per round, RUNS rounds), so that a
# slow spell on a shared machine hits every row alike; a row's speed against
# its baseline is the median of the per-round ratios.
# run LABEL OUTPUT COMMAND...: one timed run, appended to $RESULTS as
# label, round, wall s, peak RSS MB, output bytes, CPU s. OUTPUT is a file,
# or `json:CACHE_DIR` for the layer blob a `quarry build --json` run wrote.
ROUND=0
run() {
    local label=$1 output=$2
    shift 2
    [[ $output == json:* ]] || rm -f "$output"
    # Dirty pages the previous run left (its output) are written back now,
    # not during this run: otherwise whichever row follows a large write
    # pays for it.
    sync
    /usr/bin/time -v -o "$BENCH/time.txt" "$@" >"$BENCH/stdout.txt"
    local t r cpu size=0
    t=$(awk '/Elapsed \(wall clock\)/ {n = split($NF, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; printf "%.2f", s}' "$BENCH/time.txt")
    r=$(awk -F: '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$BENCH/time.txt")
    cpu=$(awk -F: '/User time|System time/ {s += $2} END {printf "%.1f", s}' "$BENCH/time.txt")
    case $output in
        json:*) output=$(blob_of "${output#json:}") ;;
    esac
    [ -e "$output" ] && size=$(stat -c %s "$output")
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$ROUND" "$t" "$r" "$size" "$cpu" >>"$RESULTS"
    echo "  round $ROUND, $label: ${t}s, ${cpu} CPU s, ${r} MB RSS" >&2
}

# The layer blob a `quarry build --json` run wrote into its cache.
blob_of() {
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); l=d["layers"][0]; print(sys.argv[2] + "/blobs/sha256/" + l["digest"].split(":")[1])' "$BENCH/stdout.txt" "$1"
}

# bench_tree NAME TREE NOOP_TREE: every row on TREE, then a first build of
# NOOP_TREE from an empty cache and its no-op rebuild; prints NAME's table.
bench_tree() {
    local name=$1 tree=$2 noop_tree=$3
    image "$BENCH/pack-$name.toml" "bench-pack-$name" "$tree"
    image "$BENCH/noop-$name.toml" "bench-noop-$name" "$noop_tree"
    # Warm the page cache so every contender reads the tree from memory.
    tar -c -C "$tree" --exclude=./.complete . | cat >/dev/null
    RESULTS=$BENCH/results-$name.tsv
    : >"$RESULTS"
    local load_before
    load_before=$(cut -d' ' -f1-3 /proc/loadavg)
    local tarc=(tar -c -C "$tree" --exclude=./.complete .)
    echo "packing $tree ($(du -sh --exclude=.complete "$tree" | cut -f1)), RUNS=$RUNS rounds" >&2
    # quarry hashes file contents for its cache key: a first build of a tree
    # hashes each file as packing reads it, later builds only what the stat
    # memo does not know. Like a user's rebuilds, the timed `--no-cache` runs
    # share one cache dir whose stat memo one untimed build fills; the `empty
    # cache` rows and the no-op section time first builds from an empty cache.
    CACHE=$BENCH/cache-pack-$name
    rm -rf "$CACHE"
    "$Q" build "$BENCH/pack-$name.toml" --json --compression none --cache-dir "$CACHE" -o "$OUT/img-warm" >/dev/null
    rm -rf "$CACHE/blobs" "$CACHE/layers" "$OUT/img-warm"
    # zstd levels 1 and 3 too: level 2 (the default) and the CLI's level 3 give
    # about the same output size; the sizes are reported.
    # Each baseline runs right before the quarry rows compared with it, so a
    # ratio compares runs seconds apart, not minutes.
    for ((ROUND = 1; ROUND <= RUNS; ROUND++)); do
        run "tar -c > file" "$OUT/plain.tar" bash -c "${tarc[*]} > $OUT/plain.tar"
        quarry_row "$name" --compression none
        run "tar -c | zstd -3 -T2" "$OUT/tar.zst" bash -c "${tarc[*]} | zstd -q -3 -T2 > $OUT/tar.zst"
        quarry_row "$name" --compression zstd
        cold_row "$name" zstd
        quarry_row "$name" --compression zstd --compression-level 1
        quarry_row "$name" --compression zstd --compression-level 3
        run "tar -c | pigz -6 -p2" "$OUT/tar.pigz.gz" bash -c "${tarc[*]} | pigz -6 -p2 > $OUT/tar.pigz.gz"
        quarry_row "$name" --compression gzip
        cold_row "$name" gzip
        run "tar -c | gzip -6" "$OUT/tar.gz" bash -c "${tarc[*]} | gzip -6 > $OUT/tar.gz"
    done
    rm -rf "$CACHE/blobs" "$CACHE/layers" "$OUT"/img-*
    local input
    input=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["layers"][0]["size"])' "$BENCH/build-$name-compressionnone.json")

    # No-op rebuild: a first build into a fresh cache, then the same build again.
    local noop_cache=$BENCH/cache-noop-$name
    rm -rf "$noop_cache" "$OUT/img-noop"
    tar -c -C "$noop_tree" . | cat >/dev/null
    local noop=("$Q" build "$BENCH/noop-$name.toml" --json --cache-dir "$noop_cache" -o "$OUT/img-noop")
    local noop_mb
    noop_mb=$(du -sm --exclude=.complete "$noop_tree" | cut -f1)
    echo "no-op rebuild of $noop_tree (${noop_mb} MB)" >&2
    /usr/bin/time -v -o "$BENCH/time.txt" "${noop[@]}" >"$BENCH/stdout.txt"
    local first_s first_cpu first_rss first_json
    first_s=$(awk '/Elapsed/ {print $NF}' "$BENCH/time.txt")
    first_cpu=$(awk -F: '/User time|System time/ {s += $2} END {printf "%.1f", s}' "$BENCH/time.txt")
    first_rss=$(awk -F: '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$BENCH/time.txt")
    first_json=$(cat "$BENCH/stdout.txt")
    for ((ROUND = 1; ROUND <= RUNS; ROUND++)); do
        run "no-op rebuild" /nonexistent "${noop[@]}"
    done
    local noop_json
    noop_json=$(cat "$BENCH/stdout.txt")
    report "$name" "$input" "$first_s" "$first_rss" "$first_json" "$noop_json" "$first_cpu" "$load_before" \
        "$(cut -d' ' -f1-3 /proc/loadavg)" "$(nproc)" "$noop_mb"
}

# quarry_row NAME FLAGS...: one timed `quarry build --no-cache` with these
# flags, the stat memo warm.
quarry_row() {
    local name=$1 id
    shift
    id=$name-$(tr -d ' -' <<<"$*")
    rm -rf "$CACHE/blobs" "$CACHE/layers" "$OUT/img-$id"
    run "quarry build $*" "json:$CACHE" \
        "$Q" build "$BENCH/pack-$name.toml" --json --no-cache "$@" --cache-dir "$CACHE" -o "$OUT/img-$id"
    cp "$BENCH/stdout.txt" "$BENCH/build-$id.json"
}

# cold_row NAME COMPRESSION: one timed first build from an empty cache
# directory (no stat memo: every file's content is hashed for the key, as
# it is packed).
cold_row() {
    local name=$1 compression=$2 cold=$BENCH/cache-cold-$1
    rm -rf "$cold" "$OUT/img-cold"
    run "quarry build --compression $compression (empty cache)" "json:$cold" \
        "$Q" build "$BENCH/pack-$name.toml" --json --compression "$compression" --cache-dir "$cold" -o "$OUT/img-cold"
}

report() {
    python3 - "$RESULTS" "$@" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    label, rnd, s, rss, size, cpu = line.rstrip("\n").split("\t")
    runs.setdefault(label, {})[int(rnd)] = (float(s), int(rss), int(size), float(cpu))
med = lambda xs: statistics.median(xs)
res = {k: tuple(med([r[i] for r in v.values()]) for i in range(4)) for k, v in runs.items()}
name, inp = sys.argv[2], int(sys.argv[3])
def secs(s):
    t = 0.0
    for p in s.split(":"):
        t = t * 60 + float(p)
    return t
first_s, first_rss, first_cpu = secs(sys.argv[4]), int(sys.argv[5]), float(sys.argv[8])
first, noop = json.loads(sys.argv[6])["layers"][0], json.loads(sys.argv[7])["layers"][0]
noop_mb = sys.argv[12]
base = {
    "quarry build --compression none": "tar -c > file",
    "quarry build --compression gzip": "tar -c | pigz -6 -p2",
    "quarry build --compression gzip (empty cache)": "tar -c | pigz -6 -p2",
    "quarry build --compression zstd": "tar -c | zstd -3 -T2",
    "quarry build --compression zstd (empty cache)": "tar -c | zstd -3 -T2",
    "quarry build --compression zstd --compression-level 1": "tar -c | zstd -3 -T2",
    "quarry build --compression zstd --compression-level 3": "tar -c | zstd -3 -T2",
}
md = lambda s: s.replace("|", "\\|")
rounds = len(next(iter(runs.values())))
print()
print(f"## {name}: {inp / 1e6:.0f} MB of tar ({inp} bytes) from copies of /usr; MB/s are of input; medians of {rounds} round(s);")
print(f"'vs baseline' is the median of the per-round ratios (range in brackets);")
print(f"{sys.argv[11]} cores, load average {sys.argv[9]} before, {sys.argv[10]} after (other work on the machine slows every row)")
print()
print("| pipeline | wall s | CPU s | MB/s | vs baseline | CPU vs baseline | output MB | size vs baseline | peak RSS MB |")
print("|---|---|---|---|---|---|---|---|---|")
for label, (s, rss, size, cpu) in res.items():
    if label.startswith("no-op"):
        continue
    vs = cpu_vs = size_vs = ""
    if label in base:
        b = base[label]
        ratios = sorted(runs[b][r][0] / runs[label][r][0] for r in runs[label] if r in runs[b])
        rng = f" [{ratios[0]:.2f}-{ratios[-1]:.2f}]" if len(ratios) > 1 else ""
        vs = f"{med(ratios):.2f}x{rng} `{md(b)}`"
        cpu_vs = f"{res[b][3] / cpu:.2f}x"
        size_vs = f"{size / res[b][2]:.3f}"
    print(f"| `{md(label)}` | {s:.2f} | {cpu:.1f} | {inp / 1e6 / s:.0f} | {vs} | {cpu_vs} | {size / 1e6:.0f} | {size_vs} | {rss} |")
s, rss, _, cpu = res["no-op rebuild"]
print(f"| first build, {noop_mb} MB `dir` layer, empty cache (gzip) | {first_s:.2f} | {first_cpu:.1f} | | | | {first['size'] / 1e6:.0f} | | {first_rss} |")
print(f"| no-op rebuild of that image | {s:.2f} | {cpu:.1f} | | {first_s / s:.0f}x faster than the first build | | | | {rss} |")
print()
print(f"no-op rebuild: cached={noop['cached']} files_hashed={noop['files_hashed']} same digest={noop['digest'] == first['digest']}")
PY
}

for which in $TREES; do
    tree_var=TREE_$which noop_var=NOOP_TREE_$which
    bench_tree "$which" "${!tree_var}" "${!noop_var}"
done

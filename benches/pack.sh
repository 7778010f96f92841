#!/usr/bin/env bash
# Layer packing benchmark: quarry's gzip, zstd and uncompressed layers against
# `tar -c | gzip -6`, `tar -c | pigz -6 -p2`, `tar -c | zstd -3 -T2` and
# `tar -c > file`, on one input tree of >= 1 GB of mixed files copied from
# /usr; then a no-op rebuild of an image with a ~2 GB `dir` layer against its
# first build. Prints a table: seconds, MB/s of input, throughput and size
# ratios against the baseline tool, output size, peak RSS (GNU time).
#
# Usage: benches/pack.sh            (RUNS=3 benches/pack.sh: 3 rounds, medians)
# Inputs and outputs live under target/bench/ (about 8 GB of disk).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
BENCH=$ROOT/target/bench
RUNS=${RUNS:-1}
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
TREE=$BENCH/tree-1g
TREE2=$BENCH/tree-2g
MIXED=(/usr/bin /usr/sbin /usr/include /usr/share /usr/libexec)
make_tree "$TREE" 1000 "${MIXED[@]}"
make_tree "$TREE2" 2000 "${MIXED[@]}" /usr/lib/x86_64-linux-gnu /usr/lib/gcc

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
image "$BENCH/pack.toml" bench-pack "$TREE"
image "$BENCH/noop.toml" bench-noop "$TREE2"

OUT=$BENCH/out
mkdir -p "$OUT"
# Warm the page cache so every contender reads the tree from memory.
tar -c -C "$TREE" --exclude=./.complete . | cat >/dev/null

# Rows are run in rounds (every row once per round, RUNS rounds), so that a
# slow spell on a shared machine hits every row alike; a row's speed against
# its baseline is the median of the per-round ratios.
# run LABEL OUTPUT COMMAND...: one timed run, appended to $RESULTS as
# label, round, wall s, peak RSS MB, output bytes, CPU s. OUTPUT is a file,
# or `json:CACHE_DIR` for the layer blob a `quarry build --json` run wrote.
RESULTS=$BENCH/results.tsv
: >"$RESULTS"
ROUND=0
run() {
    local label=$1 output=$2
    shift 2
    [[ $output == json:* ]] || rm -f "$output"
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

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
TARC=(tar -c -C "$TREE" --exclude=./.complete .)
echo "packing $TREE ($(du -sh --exclude=.complete "$TREE" | cut -f1)), RUNS=$RUNS rounds" >&2
# quarry hashes file contents for its cache key; a first build of a tree
# reads every file once more for that. Like a user's rebuilds, the timed
# `--no-cache` runs share one cache dir whose stat memo one untimed build
# fills; the no-op section below times a first build from an empty cache.
CACHE=$BENCH/cache-pack
rm -rf "$CACHE"
"$Q" build "$BENCH/pack.toml" --json --compression none --cache-dir "$CACHE" -o "$OUT/img-warm" >/dev/null
rm -rf "$CACHE/blobs" "$CACHE/layers" "$OUT/img-warm"
# zstd levels 1 and 3 too: level 2 (the default) and the CLI's level 3 give
# about the same output size; the sizes are reported.
# quarry_row FLAGS...: one timed `quarry build --no-cache` with these flags.
quarry_row() {
    local id
    id=$(tr -d ' -' <<<"$*")
    rm -rf "$CACHE/blobs" "$CACHE/layers" "$OUT/img-$id"
    run "quarry build $*" "json:$CACHE" \
        "$Q" build "$BENCH/pack.toml" --json --no-cache "$@" --cache-dir "$CACHE" -o "$OUT/img-$id"
    cp "$BENCH/stdout.txt" "$BENCH/build-$id.json"
}
# Each baseline runs right before the quarry rows compared with it, so a
# ratio compares runs seconds apart, not minutes.
for ((ROUND = 1; ROUND <= RUNS; ROUND++)); do
    run "tar -c > file" "$OUT/plain.tar" bash -c "${TARC[*]} > $OUT/plain.tar"
    quarry_row --compression none
    run "tar -c | zstd -3 -T2" "$OUT/tar.zst" bash -c "${TARC[*]} | zstd -q -3 -T2 > $OUT/tar.zst"
    quarry_row --compression zstd
    quarry_row --compression zstd --compression-level 1
    quarry_row --compression zstd --compression-level 3
    run "tar -c | pigz -6 -p2" "$OUT/tar.pigz.gz" bash -c "${TARC[*]} | pigz -6 -p2 > $OUT/tar.pigz.gz"
    quarry_row --compression gzip
    run "tar -c | gzip -6" "$OUT/tar.gz" bash -c "${TARC[*]} | gzip -6 > $OUT/tar.gz"
done
rm -rf "$CACHE/blobs" "$CACHE/layers" "$OUT"/img-*
INPUT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["layers"][0]["size"])' "$BENCH/build-compressionnone.json")

# No-op rebuild of the ~2 GB image: a first build into a fresh cache, then the same build again.
NOOP_CACHE=$BENCH/cache-noop
rm -rf "$NOOP_CACHE" "$OUT/img-noop"
tar -c -C "$TREE2" . | cat >/dev/null
NOOP=("$Q" build "$BENCH/noop.toml" --json --cache-dir "$NOOP_CACHE" -o "$OUT/img-noop")
echo "no-op rebuild of $TREE2 ($(du -sh --exclude=.complete "$TREE2" | cut -f1))" >&2
/usr/bin/time -v -o "$BENCH/time.txt" "${NOOP[@]}" >"$BENCH/stdout.txt"
FIRST_S=$(awk '/Elapsed/ {print $NF}' "$BENCH/time.txt")
FIRST_CPU=$(awk -F: '/User time|System time/ {s += $2} END {printf "%.1f", s}' "$BENCH/time.txt")
FIRST_RSS=$(awk -F: '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$BENCH/time.txt")
FIRST_JSON=$(cat "$BENCH/stdout.txt")
for ((ROUND = 1; ROUND <= RUNS; ROUND++)); do
    run "no-op rebuild (2 GB dir layer)" /nonexistent "${NOOP[@]}"
done
NOOP_JSON=$(cat "$BENCH/stdout.txt")

python3 - "$RESULTS" "$INPUT" "$FIRST_S" "$FIRST_RSS" "$FIRST_JSON" "$NOOP_JSON" "$FIRST_CPU" "$LOAD_BEFORE" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(nproc)" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    label, rnd, s, rss, size, cpu = line.rstrip("\n").split("\t")
    runs.setdefault(label, {})[int(rnd)] = (float(s), int(rss), int(size), float(cpu))
med = lambda xs: statistics.median(xs)
res = {k: tuple(med([r[i] for r in v.values()]) for i in range(4)) for k, v in runs.items()}
inp = int(sys.argv[2])
def secs(s):
    t = 0.0
    for p in s.split(":"):
        t = t * 60 + float(p)
    return t
first_s, first_rss, first_cpu = secs(sys.argv[3]), int(sys.argv[4]), float(sys.argv[7])
first, noop = json.loads(sys.argv[5])["layers"][0], json.loads(sys.argv[6])["layers"][0]
base = {
    "quarry build --compression none": "tar -c > file",
    "quarry build --compression gzip": "tar -c | pigz -6 -p2",
    "quarry build --compression zstd": "tar -c | zstd -3 -T2",
    "quarry build --compression zstd --compression-level 1": "tar -c | zstd -3 -T2",
    "quarry build --compression zstd --compression-level 3": "tar -c | zstd -3 -T2",
}
md = lambda s: s.replace("|", "\\|")
rounds = len(next(iter(runs.values())))
print(f"input: {inp / 1e6:.0f} MB of tar ({inp} bytes) from copies of /usr; MB/s are of input; medians of {rounds} round(s);")
print(f"'vs baseline' is the median of the per-round ratios (range in brackets);")
print(f"{sys.argv[10]} cores, load average {sys.argv[8]} before, {sys.argv[9]} after (other work on the machine slows every row)")
print()
print("| pipeline | wall s | CPU s | MB/s | vs baseline | CPU vs baseline | output MB | size vs baseline | peak RSS MB |")
print("|---|---|---|---|---|---|---|---|---|")
for name, (s, rss, size, cpu) in res.items():
    if name.startswith("no-op"):
        continue
    vs = cpu_vs = size_vs = ""
    if name in base:
        b = base[name]
        ratios = sorted(runs[b][r][0] / runs[name][r][0] for r in runs[name] if r in runs[b])
        rng = f" [{ratios[0]:.2f}-{ratios[-1]:.2f}]" if len(ratios) > 1 else ""
        vs = f"{med(ratios):.2f}x{rng} `{md(b)}`"
        cpu_vs = f"{res[b][3] / cpu:.2f}x"
        size_vs = f"{size / res[b][2]:.3f}"
    print(f"| `{md(name)}` | {s:.2f} | {cpu:.1f} | {inp / 1e6 / s:.0f} | {vs} | {cpu_vs} | {size / 1e6:.0f} | {size_vs} | {rss} |")
s, rss, _, cpu = res["no-op rebuild (2 GB dir layer)"]
print(f"| first build, 2 GB `dir` layer, empty cache (gzip) | {first_s:.2f} | {first_cpu:.1f} | | | | {first['size'] / 1e6:.0f} | | {first_rss} |")
print(f"| no-op rebuild of that image | {s:.2f} | {cpu:.1f} | | {first_s / s:.0f}x faster than the first build | | | | {rss} |")
print()
print(f"no-op rebuild: cached={noop['cached']} files_hashed={noop['files_hashed']} same digest={noop['digest'] == first['digest']}")
PY

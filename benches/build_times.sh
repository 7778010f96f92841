#!/usr/bin/env bash
# Build times of the code itself, for each git revision given, one after
# another in the same run (so a split into crates is compared on one
# machine's load): a cold release build of the binary, dev rebuilds after
# touching one file in `matrix` (near the top of the house) and one in `zip`
# (a floor near the bottom), the test binaries rebuilt and linked after the
# `zip` edit, and the fast lane (unit tests and the shape test: its rebuild
# after the `matrix` edit, then its run). Each revision is checked out in a
# worktree under $WORK with its own target directory, nothing shared, and
# incremental compilation off, as CI builds.
#
# usage: benches/build_times.sh REV...    (e.g. 80d380f HEAD)
# Prints one table row per measure and revision: wall s, CPU s (user+sys),
# peak RSS MB. Each revision's release binary is left as $WORK/quarry-REV. Needs the crates in cargo's registry cache (a first
# `cargo fetch` does it); takes about 25 minutes per revision on two cores.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${WORK:-$(mktemp -d /tmp/quarry-build-times.XXXXXX)}
export CARGO_INCREMENTAL=0
[ $# -gt 0 ] || { echo "usage: $0 REV..." >&2; exit 2; }

# `measure NAME REV CMD...`: run CMD, print "| NAME | REV | wall | cpu | rss |".
measure() {
  local name=$1 rev=$2
  shift 2
  local t
  t=$(mktemp)
  /usr/bin/time -f "%e %U %S %M" -o "$t" "$@" >/dev/null 2>&1 || { echo "$name failed at $rev: $*" >&2; exit 1; }
  read -r wall user sys rss <"$t"
  rm -f "$t"
  printf '| %s | %s | %.1f | %.1f | %d |\n' "$name" "$rev" "$wall" "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')" "$((rss / 1024))"
}

echo "| measure | revision | wall s | CPU s | peak RSS MB |"
echo "|---|---|---|---|---|"
for rev in "$@"; do
  short=$(git -C "$repo" rev-parse --short "$rev")
  tree=$work/$short
  [ -d "$tree" ] || git -C "$repo" worktree add --detach "$tree" "$rev" >/dev/null 2>&1
  cd "$tree"
  export CARGO_TARGET_DIR=$tree/target
  # A workspace tests every crate; one crate only itself.
  all=""
  grep -q '^\[workspace\]' Cargo.toml && all="--workspace"
  zip_file=$(git ls-files | grep -E '(^|/)src/zip/time\.rs$')
  matrix_file=$(git ls-files | grep -E '(^|/)src/matrix/plan\.rs$')
  # COLD=0 skips it (a worktree left by an earlier run keeps its target).
  [ "${COLD:-1}" = 0 ] || measure "cold release build" "$short" cargo build --release --locked --bin quarry
  # Kept for comparing what each revision builds (the README's main job).
  [ -x "$CARGO_TARGET_DIR/release/quarry" ] && cp "$CARGO_TARGET_DIR/release/quarry" "$work/quarry-$short"
  cargo build --locked --bin quarry >/dev/null 2>&1
  touch "$matrix_file"
  measure "dev rebuild, one file in matrix" "$short" cargo build --locked --bin quarry
  touch "$zip_file"
  measure "dev rebuild, one file in zip" "$short" cargo build --locked --bin quarry
  cargo test --locked $all --no-run >/dev/null 2>&1
  touch "$zip_file"
  measure "test binaries rebuilt and linked after the zip edit" "$short" cargo test --locked $all --no-run
  lane="--lib"
  [ -n "$all" ] && lane="--workspace --lib --test code_shape"
  cargo test --locked $lane --no-run >/dev/null 2>&1
  touch "$matrix_file"
  measure "fast lane rebuilt after the matrix edit" "$short" cargo test --locked $lane --no-run
  measure "fast lane run" "$short" cargo test --locked $lane
  cd "$repo"
  git worktree remove --force "$tree"
done

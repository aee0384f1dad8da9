#!/usr/bin/env bash
# One table: execute of the bench Pod (examples/bench/pod.json) by native
# Rust in process, iar on a reused and on a fresh instance (the Rust labels
# plugin, and the Go SDK's port of it: the Go row), and a Velero
# BackupItemAction v2 plugin driven through Velero's own plugin client; and
# start-up of each; Velero's own PodAction as a wasm component against its
# native build (bench/velero-builtins.sh); then the 10,000-item backup ratio
# (examples/backup_ratio).
# Builds the Velero anchor (bench/velero, Go; its
# dependencies come from Go's module and build caches) and iar (release).
#
#   bash bench/compare.sh            # defaults
#   ROUNDS=40 CALLS=200 VELERO_CALLS=4000 BACKUP_ROUNDS=9 bash bench/compare.sh
#
# The machines are shared: read the ratios, not the absolute figures.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/target/velero-anchor"
mkdir -p "$out/plugins"

echo "== building the Velero anchor (bench/velero)" >&2
(cd "$root/bench/velero" && go build -o "$out/plugins/iar-bench-labels" ./plugin \
  && go build -o "$out/velero-anchor" ./driver)

echo "== building iar (release)" >&2
cargo build --release -q -p iar --bin iar --example compare --example backup_ratio --manifest-path "$root/Cargo.toml"

# The Go row: the Go SDK's labels (go-sdk/examples/labels), built by
# go-sdk/build.sh with the iar just built (GO_ROW=0 skips it).
go_args=()
if [ "${GO_ROW:-1}" != 0 ]; then
  echo "== building the Go SDK's labels (go-sdk/build.sh)" >&2
  IAR="$root/target/release/iar" bash "$root/go-sdk/build.sh" "$root/target/go-sdk" >/dev/null
  go_args=(--go "$root/target/go-sdk/labels-go.wasm")
fi

echo "== Velero plugin: ${VELERO_CALLS:-4000} calls, ${STARTS:-20} start-ups" >&2
ANCHOR_PLUGIN_DIR="$out/plugins" ANCHOR_ITEM="$root/examples/bench/pod.json" \
  ANCHOR_ITERATIONS="${VELERO_CALLS:-4000}" ANCHOR_STARTS="${STARTS:-20}" \
  "$out/velero-anchor" drive > "$out/anchor.json"

echo "== iar: ${ROUNDS:-20} rounds × ${CALLS:-200} calls" >&2
echo "date: $(date -u +%FT%TZ); $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$root/target/release/examples/compare" --velero "$out/anchor.json" \
  --rounds "${ROUNDS:-20}" --calls "${CALLS:-200}" --starts "${STARTS:-20}" "${go_args[@]}"

# Velero's own PodAction, unchanged, as a wasm component against its native
# build on Velero's plugin path (bench/velero-builtins.sh; BUILTIN_ROWS=0
# skips it: the first run builds Velero's module twice, minutes).
if [ "${BUILTIN_ROWS:-1}" != 0 ]; then
  CALLS="${VELERO_CALLS:-4000}" bash "$root/bench/velero-builtins.sh"
fi

# The backup ratio: 10,000 items through the plugins ÷ none, at equal
# workers, interleaved (BACKUP_ROUNDS=0 skips it). The backups' files go to
# a tmpfs where there is one (BACKUP_TMPDIR to choose): on ext4 each run's
# thousands of created and rewritten snapshot files make the next slower.
if [ "${BACKUP_ROUNDS:-5}" -gt 0 ]; then
  tmp="${BACKUP_TMPDIR:-}"
  [ -n "$tmp" ] || { [ -d /dev/shm ] && [ -w /dev/shm ] && tmp=/dev/shm; } || tmp="${TMPDIR:-/tmp}"
  echo "== backups: ${BACKUP_ROUNDS:-5} interleaved rounds, files in $tmp" >&2
  TMPDIR="$tmp" "$root/target/release/examples/backup_ratio" --rounds "${BACKUP_ROUNDS:-5}"
fi

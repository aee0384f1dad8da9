#!/usr/bin/env bash
# A pod volume's file-system backup, timed: one emptyDir volume of
# VOLUME_MIB (default 1024) MiB in 16 files of noise, backed up by
# `iar backup --volume-data` into a local store, ROUNDS times (default 5),
# each binary given interleaved so both see the same machine. Volume and
# store live on a tmpfs (/dev/shm) so the figure is iar's reading,
# hashing, compressing and writing, not the disk.
#
#   bash bench/volume.sh BINARY [BASELINE_BINARY]
#
# With two binaries it prints each one's median and the ratio.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BINARY [BASELINE_BINARY]" >&2; exit 2; }
rounds="${ROUNDS:-5}"
mib="${VOLUME_MIB:-1024}"
base="$(mktemp -d -p "${BENCH_TMPDIR:-/dev/shm}")"
trap 'rm -rf "$base"' EXIT
vol="$base/data/bench/.pods/writer/scratch"
mkdir -p "$vol" "$base/items" "$base/plugins"
for i in $(seq 16); do
  head -c $((mib * 1024 * 1024 / 16)) /dev/urandom > "$vol/file-$i"
done
cp "$(dirname "${BASH_SOURCE[0]}")/volume-pod.yaml" "$base/items/pod.yaml"
run() { # BINARY ROUND -> seconds
  local store="$base/store-$2"
  local start end
  start=$(date +%s.%N)
  "$1" backup "bench-$2" --items "$base/items" --plugins "$base/plugins" \
    --store "$store" --volume-data "$base/data" >/dev/null 2>&1
  end=$(date +%s.%N)
  # The volume was read: its manifest is in the store.
  [ -f "$store/backups/bench-$2/volumes/manifests/bench/writer/scratch.json.gz" ] ||
    { echo "$1: no volume manifest in $store" >&2; exit 1; }
  rm -rf "$store"
  echo "$end - $start" | bc
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "date: $(date -u +%FT%TZ); $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg); ${mib} MiB in 16 files"
new=(); old=()
for r in $(seq "$rounds"); do
  new+=("$(run "$1" "n$r")")
  [ $# -ge 2 ] && old+=("$(run "$2" "o$r")")
done
n=$(printf '%s\n' "${new[@]}" | median)
echo "binary:   median ${n}s over $rounds rounds (${new[*]})"
if [ $# -ge 2 ]; then
  o=$(printf '%s\n' "${old[@]}" | median)
  echo "baseline: median ${o}s over $rounds rounds (${old[*]})"
  echo "ratio binary/baseline: $(echo "scale=3; $n / $o" | bc)"
fi

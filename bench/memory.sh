#!/usr/bin/env bash
# Peak memory and throughput of `iar backup` against the number of items:
# one JSON List of N small ConfigMaps (~1.1 KB each) through the labels
# plugin, for each N given (default 10000 50000 100000). Prints one row per
# N: peak resident set (GNU time's %M), wall time, items per second, and
# KiB of peak per item. Run it with nothing else busy on the machine.
#
#   bash bench/memory.sh [N...]
#   IAR=path/to/iar bash bench/memory.sh 50000   # another build, same inputs
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 50000 100000)
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time; Debian: apt-get install time)" >&2; exit 1; }

iar="${IAR:-}"
if [ -z "$iar" ]; then
  cargo build --release -q -p iar
  iar=target/release/iar
fi
cargo plugins -q
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/plugins"
cp target/wasm32-wasip2/guest/iar_plugin_labels.wasm "$work/plugins/labels.wasm"

printf '%8s  %10s  %8s  %9s  %10s\n' items "peak RSS" wall items/s "KiB/item"
for n in "${sizes[@]}"; do
  mkdir -p "$work/items-$n"
  python3 - "$n" "$work/items-$n/list.json" <<'PY'
import json, sys
n, out = int(sys.argv[1]), sys.argv[2]
items = [{"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": f"cm-{i}", "namespace": "shop", "labels": {"app": "web"}},
          "data": {"k": "x" * 1000}} for i in range(n)]
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, open(out, "w"))
PY
  /usr/bin/time -f "%M %e" -o "$work/time-$n" \
    "$iar" backup "bench-$n" --items "$work/items-$n" --plugins "$work/plugins" \
    --store "$work/store-$n" >/dev/null 2>&1
  read -r rss wall <"$work/time-$n"
  awk -v n="$n" -v rss="$rss" -v wall="$wall" 'BEGIN {
    printf "%8d  %7.1f MB  %6.2f s  %9.0f  %10.2f\n", n, rss / 1024, wall, n / wall, rss / n }'
  rm -rf "$work/items-$n" "$work/store-$n"
done

#!/usr/bin/env bash
# Velero's own PodAction (pkg/backup/actions, v1.18.3, unchanged) on one
# pod, three ways in one run: the wasm component iar serves
# (go-sdk/velero/examples/velero-builtins; `iar bench`: a reused and a fresh
# instance per call); the same source built natively as a Velero plugin
# process, driven by Velero's own plugin manager as Velero's server drives
# its built-ins (bench/velero's driver, ANCHOR_ACTION); and that native
# build's Velero gRPC client and server in one process (no process hop: a
# floor under Velero's cost). Read the ratios, not the absolute figures.
#
#   bash bench/velero-builtins.sh            (CALLS=2000)
#
# Builds iar (release), bench/velero's driver and the two Velero builds
# (go-sdk/velero/build.sh, cached by their inputs; minutes the first time).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
calls="${CALLS:-2000}"
out="$root/target/velero-builtins"
mkdir -p "$out"
echo "== building iar (release)" >&2
cargo build --release -q -p iar --bin iar --manifest-path "$root/Cargo.toml"
iar="$root/target/release/iar"
[ -n "${CARGO_TARGET_DIR:-}" ] && iar="$CARGO_TARGET_DIR/release/iar"
echo "== building Velero's built-ins, wasm and native (go-sdk/velero/build.sh)" >&2
IAR="$iar" bash "$root/go-sdk/velero/build.sh" "$out" >/dev/null
cat > "$out/pod.json" <<'JSON'
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "db-0", "namespace": "shop", "labels": {"app": "db"}},
 "spec": {"priorityClassName": "high",
  "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}, {"name": "tmp", "emptyDir": {}}],
  "containers": [{"name": "db", "image": "postgres:17", "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql"}]}]}}
JSON
cat > "$out/backup.json" <<'JSON'
{"apiVersion": "velero.io/v1", "kind": "Backup",
 "metadata": {"name": "nightly", "namespace": "velero", "uid": "d1c9a0e2-3b4f-4c5d-8e6f-7a8b9c0d1e2f"},
 "spec": {"includedNamespaces": ["shop"]}}
JSON
echo "date: $(date -u +%FT%TZ); $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== building Velero's plugin manager driver (bench/velero)" >&2
(cd "$root/bench/velero" && go build -o "$out/velero-anchor" ./driver)
mkdir -p "$out/plugins"
cp "$out/velero-builtins-native" "$out/plugins/"
echo "== native, a Velero plugin process: $calls calls" >&2
process="$(ANCHOR_PLUGIN_DIR="$out/plugins" ANCHOR_ITEM="$out/pod.json" ANCHOR_ACTION=velero.io/pod \
  ANCHOR_ITERATIONS="$calls" ANCHOR_STARTS="${STARTS:-10}" "$out/velero-anchor" drive)"
echo "== native, Velero's gRPC in one process: $calls calls" >&2
inproc="$("$out/velero-builtins-native" -action velero.io/pod -backup "$out/backup.json" \
  -iterations "$calls" "$out/pod.json" 2>/dev/null)"
# The default 64 MiB cap does not hold a reused instance of this 118 MB
# component: its Go heap grows past it within 2,000 calls (rule
# memory-cap). MEMORY_BYTES (96 MiB) is the cap it runs under, beside it
# as `iar bench` reads settings.
printf 'limits:\n  memoryBytes: %s\n' "${MEMORY_BYTES:-100663296}" > "$out/velero-builtins.yaml"
echo "== wasm: iar bench, $calls calls per row" >&2
bench="$("$iar" bench "$out/velero-builtins.wasm" --item "$out/pod.json" \
  --config action=velero.io/pod --iterations "$calls")"
echo "$bench"
# The PodAction alone (no client-go clientset, no controller-runtime),
# under the default limits: no settings file beside it.
rm -f "$out/velero-pod.yaml"
echo "== wasm, the PodAction alone: iar bench, $calls calls per row" >&2
pod="$("$iar" bench "$out/velero-pod.wasm" --item "$out/pod.json" \
  --config action=velero.io/pod --iterations "$calls")"
echo "$pod"
python3 - "$process" "$inproc" "$bench" "$out/velero-builtins.wasm" "$pod" "$out/velero-pod.wasm" <<'PY'
import json, os, re, sys
process = json.loads(sys.argv[1])
inproc = json.loads(sys.argv[2])["timing"]
def micros(s):
    v, unit = s.split()
    return float(v) * (1000 if unit == "ms" else 1)
def rows_of(text):
    rows = {}
    for line in text.splitlines():
        m = re.match(r"(warm|fresh)\s+([\d.]+ (?:µs|ms))", line)
        if m:
            rows[m.group(1)] = micros(m.group(2))
    return rows
rows, pod = rows_of(sys.argv[3]), rows_of(sys.argv[5])
mb = lambda p: os.path.getsize(p) / 1e6
velero = process["execute"]["median_us"]
print(f"Velero's PodAction, median of one call ({mb(sys.argv[4]):.0f} MB component of every built-in, {mb(sys.argv[6]):.0f} MB of the PodAction alone):")
print(f"  {'':<58}{'median':>12}{'÷ Velero':>10}")
for label, us in [
    ("native, Velero plugin process (Velero's server path)", velero),
    ("native, Velero's gRPC in one process (no hop)", inproc["medianMicros"]),
    ("iar, every built-in, reused instance (96 MiB cap)", rows["warm"]),
    ("iar, every built-in, fresh instance per call", rows["fresh"]),
    ("iar, PodAction alone, reused instance (default 64 MiB)", pod["warm"]),
    ("iar, PodAction alone, fresh instance per call", pod["fresh"]),
]:
    print(f"  {label:<58}{us:>9.1f} µs{us / velero:>9.2f}×")
print(f"  start-up, Velero plugin process + first Execute: {process['startup']['median_us'] / 1000:.1f} ms")
PY

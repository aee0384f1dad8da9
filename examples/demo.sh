#!/usr/bin/env bash
# The embedded default: back up the example application in examples/cluster
# through the three example plugins, into a fresh local store, with the web
# pod's volume backed up between its pre and post hooks, then describe it.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null
cargo plugins --quiet
cargo build --release --quiet
work="$(mktemp -d)"
mkdir "$work/plugins"
cp target/wasm32-wasip2/guest/iar_plugin_{labels,pod_volumes,pvc_snapshot}.wasm "$work/plugins/"
store="$work/iar-store"
# The pod's volume data (one directory per namespace/pvc); the hooks write
# into this copy.
cp -R examples/volume-data "$work/volume-data"
./target/release/iar backup demo --items examples/cluster --plugins "$work/plugins" \
  --store "$store" --config iar_plugin_labels:labels=backed-up-by=iar \
  --volume-data "$work/volume-data" --exec-hooks-locally
./target/release/iar describe demo --store "$store"
echo "store: $store  (iar get --store $store)"
